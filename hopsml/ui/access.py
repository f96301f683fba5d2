"""Who may read the web view: the holder of the token `hopsml ui` printed when it started, and on a loopback
address only the Unix user who started it.

The view shows every run, dataset, model and log of the root. On a host shared by a team, binding to 127.0.0.1 keeps
other machines out but not the other users of this one, and a folder's permissions do not reach through a TCP port.
So, as Jupyter does:

* Each start makes a random token (or takes HOPSML_UI_TOKEN from the environment) and prints the view's address
  with it (`http://127.0.0.1:5151/p/demo/?token=...`). Every page, API and file needs it: as that query parameter
  (the view then sets it as a cookie, HttpOnly and SameSite=Strict, and sends the browser on to the address without
  it), as the cookie, or as an `Authorization: Bearer <token>` header. It is compared in constant time. A request
  without it gets 403 and nothing else.
* On a loopback address, a connection from another local user is refused before any request is read (server.py
  looks up the peer socket's owner in /proc/net/tcp): their requests never reach the pages, and they cannot hold
  the view's connection slots either.
"""

from __future__ import annotations

import hmac
import os
import secrets
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlencode

if TYPE_CHECKING:
    from werkzeug.wrappers import Request, Response

AnyResponse = TypeVar("AnyResponse", bound="Response")   # flask's, or a page's own

TOKEN_ENV = "HOPSML_UI_TOKEN"
PARAMETER = "token"
MIN_TOKEN_CHARS = 16


def new_token() -> str:
    """The token of this start: HOPSML_UI_TOKEN when set (at least 16 characters), else a new random one."""
    given = os.environ.get(TOKEN_ENV, "")
    if given:
        if len(given) < MIN_TOKEN_CHARS:
            from hopsml.errors import HopsmlError

            raise HopsmlError(f"{TOKEN_ENV} is {len(given)} characters long: give at least {MIN_TOKEN_CHARS} "
                              "random characters, or unset it for a new token at each start")
        return given
    return secrets.token_urlsafe(32)


class TokenCheck:
    """The check every request of the view passes (see the module docstring)."""

    def __init__(self, token: str, port: int | None = None) -> None:
        self._token = token.encode()
        self.cookie = f"hopsml_ui_{port}" if port else "hopsml_ui"   # one per port: two views, two cookies

    def matches(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self._token)

    def check(self, request: Request) -> tuple[bool, bool]:
        """(allowed, the token came as the query parameter): a page reached by the printed address sets the cookie
        and is redirected to itself without the token."""
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer ") and self.matches(header[len("Bearer "):].strip()):
            return True, False
        if self.matches(request.cookies.get(self.cookie)):
            return True, False
        if self.matches(request.args.get(PARAMETER)):
            return True, True
        return False, False

    def without_token(self, request: Request) -> str:
        """The request's path and query without the token."""
        rest = [(key, value) for key, value in request.args.items(multi=True) if key != PARAMETER]
        return request.path + (f"?{urlencode(rest)}" if rest else "")

    def set_cookie(self, response: AnyResponse) -> AnyResponse:
        response.set_cookie(self.cookie, self._token.decode(), httponly=True, samesite="Strict", path="/")
        return response
