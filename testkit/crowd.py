"""A route of testkit/fake_web.py whose requests wait for one another, to show
whether calls ran at once: each request waits (at most `patience` seconds)
until `size` are in flight together, and the page says how many were; with
`hold`, requests then wait until the test releases them (a call to cancel
while it is surely running); with `answer_order`, a gathered request answers
only after those of the paths before its own (so calls finish in another
order than the model's)."""

from __future__ import annotations

import threading

from testkit.fake_web import Answer, Seen


class Crowd:
    def __init__(self, size: int, patience: float = 5.0, hold: bool = False, answer_order: tuple[str, ...] = ()) -> None:
        self.size, self.patience, self.hold, self.answer_order = size, patience, hold, answer_order
        self.in_flight = 0
        self.most_in_flight = 0
        self.answered: list[str] = []
        """Paths in the order they were answered."""
        self._changed = threading.Condition()
        self._released = False

    def release(self) -> None:
        with self._changed:
            self._released = True
            self._changed.notify_all()

    def __call__(self, seen: Seen) -> Answer:
        with self._changed:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self._changed.notify_all()
            gathered = self._changed.wait_for(lambda: self.most_in_flight >= self.size, timeout=self.patience)
            if self.hold:
                self._changed.wait_for(lambda: self._released, timeout=60)  # the test's own bound
            if gathered and seen.path in self.answer_order:
                before = self.answer_order[: self.answer_order.index(seen.path)]
                self._changed.wait_for(lambda: set(before) <= set(self.answered), timeout=self.patience)
            self.in_flight -= 1
            self.answered.append(seen.path)
            self._changed.notify_all()
            crowd = f"{self.size} in flight" if gathered else "alone"
            return Answer(body=f"<html><body><p>{seen.path} answered {crowd}.</p></body></html>")
