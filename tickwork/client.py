"""A small HTTP client of the tickwork API for the CLI; API errors become readable exits."""

from __future__ import annotations

from typing import Any

import httpx
import typer
from rich.console import Console
from rich.text import Text

from tickwork.settings import ClientSettings
from tickwork.terminal_text import safe

err = Console(stderr=True)


class ApiClient:
    def __init__(self, settings: ClientSettings | None = None) -> None:
        settings = settings or ClientSettings()
        if not settings.token:
            fail("set TICKWORK_TOKEN to an operator token (`tickwork up` prints one; "
                 "`tickwork token create --tenant NAME` makes more)")
        self._http = httpx.Client(base_url=settings.api_url, timeout=30,
                                  headers={"Authorization": f"Bearer {settings.token}"})

    def call(self, method: str, path: str, *, json: Any = None, params: dict | None = None,
             headers: dict | None = None) -> Any:
        try:
            response = self._http.request(method, path, json=json, params=params, headers=headers)
        except httpx.HTTPError as exc:
            fail(f"cannot reach the tickwork API at {self._http.base_url} ({exc}); is it running? "
                 "(set TICKWORK_API_URL)")
        if response.status_code >= 400:
            body = _json_or_none(response)
            message = body.get("message") if isinstance(body, dict) else response.text[:300]
            raise ApiError(response.status_code, body or {}, message or response.reason_phrase)
        return _json_or_none(response)

    def items(self, path: str, params: dict | None = None) -> list[dict]:
        """Every item of a paginated list."""
        params, found = dict(params or {}), []
        while True:
            page = self.call("GET", path, params=params)
            found.extend(page["items"])
            if not page.get("next_cursor"):
                return found
            params["cursor"] = page["next_cursor"]


class ApiError(Exception):
    def __init__(self, status: int, body: dict, message: str) -> None:
        super().__init__(message)
        self.status, self.body, self.message = status, body, message

    def said_to_user(self, flags: dict[str, str] | None = None,
                     ids: dict[str, tuple[str, str]] | None = None) -> str:
        """The message in the words the user typed: the API's field becomes the CLI flag
        (timeout_minutes -> --timeout) or the argument (run_id -> RUN_ID, with the verb that
        lists them), and the validator's phrasing reads as a sentence."""
        field = self.body.get("field") if isinstance(self.body, dict) else None
        if not field:
            return self.message
        if self.body.get("error") == "invalid_path" and field in (ids or {}):
            argument, lister = ids[field]
            return f"{argument} is not a valid id; copy one from `{lister}`"
        name = (flags or {}).get(field, repr(field))
        rest = self.message
        for prefix in (f"{field}: ", f"{field} "):
            if rest.startswith(prefix):
                rest = rest[len(prefix):]
                break
        else:
            return self.message  # a sentence of its own that happens to carry a field
        for raw, plain in _PYDANTIC_WORDS:
            if rest.startswith(raw):
                rest = plain + rest[len(raw):]
                break
        return f"{name} {rest}"


# pydantic's phrasing, as the API passes it on, and how a sentence about a flag reads.
_PYDANTIC_WORDS = (("Input should be", "must be"), ("String should have", "must have"),
                   ("List should have", "must have"), ("Value should have", "must have"),
                   ("String should match pattern", "must match the pattern"),
                   ("Value error, ", "is not valid: "),
                   ("Field required", "is required"), ("Extra inputs are not permitted",
                                                      "is not a known field"))


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def say_error(message: str) -> None:
    # The message can quote what a model or a person typed: printed as text, never markup.
    # soft_wrap: one sentence stays one line (a script or a test reads it whole).
    err.print(Text.assemble(("error:", "red"), " ", safe(message)), highlight=False,
              soft_wrap=True)


def fail(message: str, code: int = 1) -> None:
    say_error(message)
    raise typer.Exit(code)
