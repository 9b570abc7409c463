"""``evidra serve`` with a key (Bearer or the browser's session cookie), and on loopback without one
(this machine's names only, writes from its own origin only)."""

from __future__ import annotations

from pathlib import Path

import httpx

from evidra.app.auth import COOKIE, session_token
from evidra.app.http import ServeOptions
from evidra.app.server import running
from evidra.app.workspace import Workspace


def test_a_key_guards_every_route_but_health_and_login(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "store")
    workspace.start_sync()
    try:
        with running(workspace, ServeOptions(api_key="s3cret", access_log=False)) as url:
            assert httpx.get(f"{url}/health").json()["status"] == "ok"
            refused = httpx.get(f"{url}/api/documents")
            assert refused.status_code == 401 and "EVIDRA_APP_API_KEY" in refused.json()["error"]
            assert (
                httpx.get(f"{url}/api/documents", headers={"Authorization": "Bearer nope"}).status_code == 401
            )
            assert (
                httpx.get(f"{url}/api/documents", headers={"Authorization": "Bearer s3cret"}).status_code
                == 200
            )
            assert httpx.get(f"{url}/v1/models").status_code == 401
            page = httpx.get(url, headers={"Accept": "text/html"})
            assert page.status_code == 303 and page.headers["location"] == "/login"
            wrong = httpx.post(f"{url}/login", content=b"key=guess")
            assert wrong.status_code == 401 and "not the server's key" in wrong.text
            right = httpx.post(f"{url}/login", content=b"key=s3cret")
            assert right.status_code == 303 and right.cookies[COOKIE] == session_token("s3cret")
            assert "s3cret" not in right.headers["set-cookie"] and "HttpOnly" in right.headers["set-cookie"]
            home = httpx.get(url, cookies={COOKIE: right.cookies[COOKIE]})
            assert home.status_code == 200 and "Add documents" in home.text
    finally:
        workspace.close()


def test_loopback_answers_its_own_names_and_writes_from_its_own_origin(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "store")
    workspace.start_sync()
    try:
        with running(workspace, ServeOptions(access_log=False)) as url:
            port = url.rsplit(":", 1)[1]
            assert httpx.get(f"{url}/health", headers={"Host": f"localhost:{port}"}).status_code == 200
            rebound = httpx.get(f"{url}/api/documents", headers={"Host": f"evil.example:{port}"})
            assert rebound.status_code == 421 and "localhost only" in rebound.json()["error"]
            foreign = httpx.post(f"{url}/api/index", headers={"Origin": "https://evil.example"})
            assert foreign.status_code == 403 and "another origin" in foreign.json()["error"]
            own = httpx.post(f"{url}/api/index", headers={"Origin": url})
            assert own.status_code == 200
    finally:
        workspace.close()
