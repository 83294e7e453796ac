"""The shape of a request: how many tokens are fresh, cached and generated."""

from __future__ import annotations

from dataclasses import dataclass

from infertune.model.catalog import CatalogError


@dataclass(frozen=True)
class Workload:
    """The mean request of a traffic class.

    `ttft_fresh_tokens` is the fresh-token figure that drives TTFT; the B200 load test uses the median
    (~9,400) there, while throughput counts the mean (~13K).
    `resident_prefix_tokens` is what each returning session keeps cached between turns beyond
    the in-flight streams: evicting it is what starts the cliff's feedback loop.
    `context_cv` is the spread of a stream's context across requests (standard deviation over
    mean): the mean says where the working set sits, the spread how far a batch of streams can
    overshoot it. Sessions whose context grows turn after turn have a wide one.
    """

    fresh_tokens: float
    cached_tokens: float
    output_tokens: float
    ttft_fresh_tokens: float | None = None
    resident_prefix_tokens: float = 0.0
    context_cv: float = 0.5

    @property
    def prompt_tokens(self) -> float:
        return self.fresh_tokens + self.cached_tokens

    @property
    def processed_tokens(self) -> float:
        """The B200 load test counts cached input as processed: fresh + cached + output."""
        return self.fresh_tokens + self.cached_tokens + self.output_tokens

    @property
    def context_tokens(self) -> float:
        """A stream's context at the end of its response: its KV footprint at the peak."""
        return self.prompt_tokens + self.output_tokens

    @property
    def cached_fraction(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def prefill_tokens_for_ttft(self) -> float:
        return self.ttft_fresh_tokens if self.ttft_fresh_tokens is not None else self.fresh_tokens

    def ttft_fresh_for(self, fresh_tokens: float) -> float | None:
        """The TTFT figure for another mean of fresh tokens: this shape's median-to-mean ratio kept (None
        where this shape has no separate figure, so TTFT reads the mean)."""
        if not self.ttft_fresh_tokens or self.fresh_tokens <= 0:
            return None
        return fresh_tokens * self.ttft_fresh_tokens / self.fresh_tokens


# The B200 load test: Cline's coding-agent traffic. ~13K fresh (16.5%), ~71K cached (83.5%), ~1K output
# (1,056 in the decode-time line), median fresh 9,400 for TTFT.
# Its sessions run 7-16 turns of ~14K tokens each, so contexts spread from ~14K to the 200K cap:
# a coefficient of variation of ~0.62 over requests (sim.OpenSessions, 20,000 requests).
CODING_AGENT = Workload(fresh_tokens=13_000, cached_tokens=71_000, output_tokens=1_056, ttft_fresh_tokens=9_400,
                        context_cv=0.62)
# A chat turn: short history, a medium answer (ShareGPT-like shapes).
CHAT = Workload(fresh_tokens=600, cached_tokens=1_400, output_tokens=400)
# Bulk generation: long prompts, no reuse, throughput first.
BATCH = Workload(fresh_tokens=4_000, cached_tokens=0, output_tokens=800)

WORKLOADS: dict[str, Workload] = {"coding-agent": CODING_AGENT, "chat": CHAT, "batch": BATCH}


def workload_preset(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise CatalogError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}") from None
