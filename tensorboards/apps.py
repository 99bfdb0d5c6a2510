from django.apps import AppConfig


class TensorboardsConfig(AppConfig):
    name = "tensorboards"
    verbose_name = "TensorBoards"
