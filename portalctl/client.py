"""HTTP to the portal: token auth, JSON in and out, and every failure turned into an ApiError with its exit code.

Exit codes (the contract scripts rely on; also in `portalctl --help` and README):
0 ok; 1 the portal refused the request (400 validation, 409 conflict, other 4xx); 2 usage or configuration
error; 3 not found (404); 4 authentication or permission (401, 403); 5 server or network error (5xx,
connection refused, timeout); 6 a followed job ended failed or cancelled.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from portalctl import __version__

OK, REFUSED, USAGE, NOT_FOUND, AUTH, UNAVAILABLE, JOB_FAILED = 0, 1, 2, 3, 4, 5, 6


class ApiError(Exception):
    """A request that did not succeed: ``exit_code`` for the shell, ``errors`` the API's error body (or None)."""

    def __init__(self, message: str, *, exit_code: int, status: int | None = None, errors=None):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.status = status
        self.errors = errors


def exit_code_for(status: int) -> int:
    if status == 404:
        return NOT_FOUND
    if status in (401, 403):
        return AUTH
    if status >= 500:
        return UNAVAILABLE
    return REFUSED


class Client:
    def __init__(self, url: str, token: str = "", *, timeout: float = 30.0):
        headers = {"User-Agent": f"portalctl/{__version__}", "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Token {token}"
        self.url = url
        self.timeout = timeout
        self._http = httpx.Client(base_url=url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def get(self, path: str, params: dict | None = None):
        return self.request("GET", path, params=params)

    def post(self, path: str, body: dict | None = None, headers: dict | None = None):
        return self.request("POST", path, json=body, headers=headers)

    def patch(self, path: str, body: dict):
        return self.request("PATCH", path, json=body)

    def request(self, method: str, path: str, **kwargs):
        """The decoded JSON of a 2xx answer; text for text/plain ones."""
        params = kwargs.pop("params", None)
        with self._errors():
            response = self._http.request(method, path, params=_clean(params), **kwargs)
        _raise_for(response)
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.text

    def get_bytes(self, path: str, params: dict | None = None) -> bytes:
        """The body of a 2xx answer as the portal sent it (a job's log: its bytes, not a decoding of them)."""
        with self._errors():
            response = self._http.get(path, params=_clean(params))
        _raise_for(response)
        return response.content

    @contextmanager
    def stream(self, path: str, params: dict | None = None) -> Iterator[Iterator[bytes]]:
        """A text stream that may last as long as a job: no read timeout, only the connect timeout."""
        timeout = httpx.Timeout(self.timeout, read=None)
        with self._errors(), self._http.stream("GET", path, params=_clean(params), timeout=timeout) as response:
            if response.is_error:
                response.read()
                _raise_for(response)
            yield response.iter_bytes()

    @contextmanager
    def _errors(self):
        try:
            yield
        except httpx.TimeoutException as exc:
            raise ApiError(
                f"the portal at {self.url} did not answer in time ({type(exc).__name__})", exit_code=UNAVAILABLE
            ) from exc
        except httpx.TransportError as exc:
            raise ApiError(f"cannot reach the portal at {self.url}: {exc}", exit_code=UNAVAILABLE) from exc


def _clean(params: dict | None) -> dict | None:
    """Leave out the filters that were not given, so the portal's defaults apply."""
    if params is None:
        return None
    return {key: value for key, value in params.items() if value is not None and value != "" and value is not False}


def _raise_for(response: httpx.Response) -> None:
    if response.is_success:
        return
    try:
        errors = response.json()
    except ValueError:  # an HTML error page from a proxy or Django's own 500 page
        errors = None
    reason = response.reason_phrase or "error"
    detail = errors.get("detail") if isinstance(errors, dict) else None
    message = f"{response.status_code} {reason}" + (f": {detail}" if isinstance(detail, str) else "")
    raise ApiError(
        message,
        exit_code=exit_code_for(response.status_code),
        status=response.status_code,
        errors=None if isinstance(detail, str) and len(errors) == 1 else errors,
    )
