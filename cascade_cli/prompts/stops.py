"""Stop strings on a text stream: text is released only once no stop string can begin in it."""

from __future__ import annotations


class StopScanner:
    """Feed pieces with push(); `stopped` turns true at the first stop string, which is cut off
    with everything after it."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = [s for s in stops if s]
        self.held = ""
        self.stopped = False

    def push(self, piece: str) -> str:
        """The text that is safe to emit after `piece`."""
        if self.stopped:
            return ""
        if not self.stops:
            return piece
        text = self.held + piece
        found = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if found:
            self.stopped = True
            self.held = ""
            return text[: min(found)]
        keep = self._partial(text)
        self.held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def _partial(self, text: str) -> int:
        """Length of the longest end of `text` that begins some stop string."""
        best = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(text)), best, -1):
                if s.startswith(text[len(text) - k :]):
                    best = k
                    break
        return best

    def flush(self) -> str:
        """What is held back once generation ends without a stop string."""
        text, self.held = self.held, ""
        return "" if self.stopped else text
