from django.urls import path

from images import views

urlpatterns = [
    path("", views.image_list, name="image-list"),
    path("builds/<int:build_id>/", views.build_detail, name="image-build-detail"),
    path("builds/<int:build_id>/cancel/", views.build_cancel, name="image-build-cancel"),
]
