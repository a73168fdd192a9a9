"""The browser proxy's rule for where a page may connect: web_fetch's rule.

The browser's traffic leaves only through an EgressProxy of the worker's;
this check makes that proxy decide exactly as WebAccess.check does for
web_fetch (public addresses and the origins [web] allow opens, never the
agent's control plane nor, unopened, an address of the worker's own host),
so navigations, subresources, page scripts and redirects all obey it; it
hands the proxy the checked address so a second DNS answer cannot
redirect the connection. Refusals are remembered for a moment, so a failed
navigation can say why instead of Chromium's bare net::ERR_ code.
"""

from __future__ import annotations

from collections import OrderedDict
from urllib.parse import urlsplit

from activities.tools.addresses import normalize_host
from activities.tools.egress_proxy import DestinationCheck, DestinationRefused
from activities.web.access import Refused, WebAccess, WebError

REMEMBERED_REFUSALS = 32
"""Destinations whose last refusal is kept (a page may try many)."""


class RecentRefusals:
    """The last refusal of each recently refused (host, port), in order."""

    def __init__(self) -> None:
        self._reasons: OrderedDict[tuple[str, int], tuple[int, str]] = OrderedDict()
        self.count = 0
        """Refusals so far: a mark to ask for those that came later."""

    def note(self, host: str, port: int, reason: str) -> None:
        self.count += 1
        self._reasons.pop((host, port), None)
        self._reasons[(host, port)] = (self.count, reason)
        while len(self._reasons) > REMEMBERED_REFUSALS:
            self._reasons.popitem(last=False)

    def reason_for(self, url: str, since: int) -> str | None:
        """Why the proxy refused `url`'s destination after mark `since`, if it did."""
        try:
            parts = urlsplit(url)
            host = normalize_host(parts.hostname or "")
            port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
        except ValueError:
            return None
        found = self._reasons.get((host, port))
        return found[1] if found and found[0] > since else None


def web_rules(access: WebAccess, refusals: RecentRefusals | None = None) -> DestinationCheck:
    async def check(host: str, port: int) -> str:
        literal = f"[{host}]" if ":" in host else host  # IPv6 in a URL needs brackets
        try:
            _, _, address = await access.check(f"http://{literal}:{port}/")
        except Refused as refused:
            if refusals is not None:
                refusals.note(host, port, str(refused))
            raise DestinationRefused(f"browser proxy: {refused}") from None
        except WebError as failure:
            if refusals is not None:
                refusals.note(host, port, str(failure))
            raise DestinationRefused(f"browser proxy: {failure}", status=502) from None
        return address

    return check
