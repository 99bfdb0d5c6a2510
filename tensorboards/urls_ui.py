"""Browser pages of TensorBoards, mounted at /tensorboards/ by config/urls.py (the boards are under /tensorboard/)."""

from django.urls import path

from tensorboards import views

urlpatterns = [
    path("<int:board_id>/", views.board_page, name="tensorboard-page"),
]
