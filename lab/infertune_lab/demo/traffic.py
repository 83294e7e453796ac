"""Traffic that starts when the demo says so: a source's time 0 placed at a later fleet time.

The fleet exists before the operator's first replica has loaded, and users who arrive at a
gateway with nothing behind it only measure the model load. So the scenario's clock starts when
the first replica is ready; `Delayed` shifts every arrival by that offset and hands finishes back
in the source's own time, so returning users still come back a think time after their answer.
"""

from __future__ import annotations

from dataclasses import replace

from infertune_lab.sim.records import RequestRecord, RequestSpec
from infertune_lab.sim.traffic import TrafficSource


class Delayed:
    def __init__(self, source: TrafficSource, offset: float) -> None:
        self.source = source
        self.offset = offset
        self.lookahead = source.lookahead
        self.cross_session = source.cross_session

    def _shift(self, spec: RequestSpec) -> RequestSpec:
        return replace(spec, arrival=spec.arrival + self.offset)

    def next_time(self) -> float:
        return self.source.next_time() + self.offset

    def peek(self) -> RequestSpec:
        return self._shift(self.source.peek())

    def pop(self) -> RequestSpec:
        return self._shift(self.source.pop())

    def on_finish(self, record: RequestRecord) -> None:
        back = -self.offset
        self.source.on_finish(replace(record, spec=replace(record.spec, arrival=record.spec.arrival + back),
                                      first_token=record.first_token + back, finish=record.finish + back))

    def on_reject(self, spec: RequestSpec, at: float) -> None:
        self.source.on_reject(replace(spec, arrival=spec.arrival - self.offset), at - self.offset)
