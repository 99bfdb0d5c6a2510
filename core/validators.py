"""Field validators shared by the apps' models."""

from django.core.validators import RegexValidator

dns_label = RegexValidator(
    r"^[a-z]([-a-z0-9]*[a-z0-9])?$",
    "Use lower-case letters, digits and '-', starting with a letter and not ending with '-'.",
)
