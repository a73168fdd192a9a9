"""Redacting text that arrives in pieces: a secret may be split across two
tokens, so text is released only where no secret can straddle the cut.

Only what may be a secret's beginning is held back (the longest end of the
text that begins some secret), so ordinary text streams on at once; a whole
secret that crosses the cut is released whole, and so redacted. Pure: the secrets and the
replacement come from the caller (activities/redaction.py's Redactor).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


class PieceRedactor:
    """Collects text and gives back what may be shown, redacted."""

    def __init__(self, secrets: Sequence[str], redact: Callable[[str], str]) -> None:
        self.secrets = [s for s in secrets if s]
        self.redact = redact
        self.pending = ""

    def add(self, text: str) -> str:
        """Takes `text` in; returns the redacted text now safe to show."""
        self.pending += text
        cut = self._safe_cut()
        released, self.pending = self.pending[:cut], self.pending[cut:]
        return self.redact(released) if released else ""

    def flush(self) -> str:
        """Everything still held, redacted (at the end of the text)."""
        released, self.pending = self.pending, ""
        return self.redact(released) if released else ""

    def _safe_cut(self) -> int:
        text = self.pending
        held = 0
        for secret in self.secrets:
            # The leftmost place within reach where the text's end begins the secret.
            place = text.find(secret[0], max(0, len(text) - len(secret) + 1))
            while place != -1:
                if secret.startswith(text[place:]):
                    held = max(held, len(text) - place)
                    break
                place = text.find(secret[0], place + 1)
        cut = len(text) - held
        moved = True
        while moved and cut > 0:
            moved = False
            for secret in self.secrets:
                # An occurrence that begins before the cut and ends after it is
                # complete (a partial one would be held): move the cut to its start.
                start = text.find(secret, max(0, cut - len(secret) + 1))
                while start != -1 and start < cut:
                    if start + len(secret) > cut:
                        cut, moved = start, True
                        break
                    start = text.find(secret, start + 1)
        return cut
