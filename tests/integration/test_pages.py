"""The API's pages run no third-party script: /docs is off unless enabled, and the viewer is
served under a Content-Security-Policy that allows only its own script (issue 8, item 6)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import httpx

from tickwork.scheduler.api.app import create_app
from tickwork.scheduler.api.viewer import STATIC

BARE = {"Authorization": ""}


async def client_of(settings, pool) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(settings, pool=pool)),
                             base_url="http://tickwork.test")


async def test_docs_pages_are_off_by_default_and_the_schema_stays(api):
    for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        response = await api.get(path, headers=BARE)
        assert response.status_code == 404, path
        assert "<script" not in response.text
    schema = await api.get("/openapi.json", headers=BARE)
    assert schema.status_code == 200 and "/v1/runs" in schema.json()["paths"]


async def test_docs_pages_come_back_only_when_the_operator_enables_them(settings, pool):
    enabled = settings.model_copy(update={"api_docs": True})
    async with await client_of(enabled, pool) as client:
        page = await client.get("/docs")
    assert page.status_code == 200 and "swagger" in page.text.lower()


def csp_directives(header: str) -> dict[str, list[str]]:
    directives = {}
    for part in filter(None, (p.strip() for p in header.split(";"))):
        name, *values = part.split()
        directives[name] = values
    return directives


async def test_the_viewer_allows_only_its_own_scripts_and_styles(api):
    for path in ("/", "/static/app.js", "/static/app.css"):
        response = await api.get(path, headers=BARE)
        assert response.status_code == 200, path
        policy = csp_directives(response.headers["content-security-policy"])
        assert policy["default-src"] == ["'none'"]
        assert policy["script-src"] == ["'self'"]  # no inline, no eval, no other origin
        assert policy["style-src"] == ["'self'"]
        assert policy["connect-src"] == ["'self'"]
        assert policy["frame-ancestors"] == ["'none'"] and policy["base-uri"] == ["'none'"]
        assert response.headers["x-content-type-options"] == "nosniff"


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict] = []
        self.inline: list[str] = []  # inline script bodies, style attributes, on* handlers
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script":
            self.scripts.append(attrs)
            self._in_script = True
        self.inline += [f"{tag} {name}" for name in attrs
                        if name == "style" or name.startswith("on")]

    def handle_endtag(self, tag):
        self._in_script = self._in_script and tag != "script"

    def handle_data(self, data):
        if self._in_script and data.strip():
            self.inline.append(data)


def test_the_viewer_page_needs_nothing_its_policy_forbids():
    page = _Page()
    page.feed((STATIC / "index.html").read_text())
    assert page.inline == []  # the policy would block them: the page must not need them
    sources = [s.get("src") for s in page.scripts]
    assert sources[0] == "/static/app.js" and all(re.fullmatch(r"/static/\w+\.js", src)
                                                   for src in sources)
    for src in sources:
        script = (STATIC / src.removeprefix("/static/")).read_text()
        # No code from strings (CSP blocks eval), no HTML from strings (event text is hostile).
        assert not re.search(r"\beval\(|new Function\(|innerHTML|outerHTML|insertAdjacentHTML|"
                             r"document\.write", script), src
        # Talks to its own origin only (the SVG namespace is a name, not an address).
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg\b)", script), src
