"""Errors that services raise and every interface turns into the API.md shapes."""


class InvalidInput(Exception):
    """Input that breaks a business rule. ``errors`` maps field -> messages (400)."""

    def __init__(self, errors: dict[str, list] | str):
        if isinstance(errors, str):
            errors = {"non_field_errors": [errors]}
        self.errors = errors
        super().__init__(errors)


class Conflict(Exception):
    """The object's state forbids the operation (409), e.g. cancelling a finished job."""
