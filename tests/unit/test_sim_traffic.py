"""Traffic: the B200 load test's coding-agent shape, arrival processes, and trace replay with strict parsing."""

from __future__ import annotations

import collections
import itertools
import random
import re
import statistics
import time
from pathlib import Path

import pytest

from infertune.cli import main
from infertune.errors import UserError
from infertune_lab.data import AZURE_CODE_TRACE
from infertune_lab.sim import (
    ClosedLoop,
    Fleet,
    OpenSessions,
    ReplicaConfig,
    RequestRecord,
    TraceError,
    TraceReplay,
    load_trace,
    shape,
    window,
)
from infertune_lab.sim.trace import TraceRow
from infertune_lab.sim.traffic import CHAT_TRACE, bursty, chat_trace, diurnal, poisson

AZURE = AZURE_CODE_TRACE


def turns(name: str, n: int = 20_000) -> list[tuple[int, int, int]]:
    """(fresh, cached prefix, output) of n consecutive turns, finishing each at once."""
    src = OpenSessions(shape(name), poisson(1.0, random.Random(1)), seed=2)
    last: dict[str, int] = {}
    out = []
    for _ in range(n):
        spec = src.pop()
        prev = last.get(spec.session, 0)
        out.append((spec.prompt_tokens - prev, prev, spec.output_tokens))
        last[spec.session] = spec.prompt_tokens + spec.output_tokens
        src.on_finish(RequestRecord(spec, "r", spec.arrival + 1, spec.arrival + 2, 0, 0))
    return out


def test_coding_agent_turns_look_like_the_b200_load_test() -> None:
    t = turns("coding-agent")
    fresh = statistics.mean(x[0] for x in t)
    cached = statistics.mean(x[1] for x in t)
    output = statistics.mean(x[2] for x in t)
    assert 11_700 < fresh < 14_300  # ~13K
    assert 64_000 < cached < 78_000  # ~71K
    assert 950 < output < 1_160  # ~1K
    assert 8_000 < statistics.median(x[0] for x in t) < 11_000  # seed's TTFT median ~9.4K
    assert 0.78 < cached / (cached + fresh) < 0.88  # 83.5% of input cached


def test_chat_is_short() -> None:
    t = turns("chat", 5_000)
    assert statistics.mean(x[0] + x[1] for x in t) < 4_000
    assert 300 < statistics.mean(x[2] for x in t) < 500


@pytest.mark.parametrize("process", [poisson, bursty, diurnal])
def test_arrival_processes_keep_their_mean_rate(process) -> None:  # type: ignore[no-untyped-def]
    times = list(itertools.takewhile(lambda t: t < 86_400, process(0.5, random.Random(7))))
    assert 0.45 < len(times) / 86_400 < 0.55
    assert times == sorted(times)


def test_bursty_and_diurnal_vary_where_poisson_does_not() -> None:
    def spread(gen) -> float:  # type: ignore[no-untyped-def]
        counts = [0] * 24
        for t in itertools.takewhile(lambda t: t < 86_400, gen):
            counts[int(t // 3600)] += 1
        return max(counts) / max(min(counts), 1)

    assert spread(poisson(0.5, random.Random(1))) < 1.3
    assert spread(diurnal(0.5, random.Random(1))) > 2.5
    per_minute = [0] * 1440
    for t in itertools.takewhile(lambda t: t < 86_400, bursty(0.5, random.Random(1))):
        per_minute[int(t // 60)] += 1
    assert max(per_minute) > 3 * 30  # bursts run at several times the mean of 30 a minute


def test_the_azure_trace_replays_end_to_end() -> None:
    rows = load_trace(AZURE)
    assert len(rows) == 8819
    fleet = Fleet(TraceReplay(rows, rate_multiplier=2.0))
    fleet.add_replica(ReplicaConfig(model="kimi-k2.6", gpu="b200", tp=8, workload="chat"))
    fleet.run_until(rows[-1].offset / 2 + 600)
    assert len(fleet.records) == 8819 and not fleet.rejected
    assert sorted(r.spec.prompt_tokens for r in fleet.records) == sorted(max(r.context_tokens, 1) for r in rows)
    assert max(r.spec.arrival for r in fleet.records) == pytest.approx(rows[-1].offset / 2)


def test_window_and_rate_multiplier() -> None:
    rows = window(load_trace(AZURE), start=600, duration=300)
    assert rows and all(0 <= r.offset < 300 for r in rows)
    replay = TraceReplay(rows, rate_multiplier=3.0)
    times = [replay.pop().arrival for _ in range(len(rows))]
    assert max(times) < 100.0


MALFORMED = {
    "bad timestamp": ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.1,10,2\nyesterday,5,1\n",
                      ":3: TIMESTAMP 'yesterday'"),
    "negative tokens": ("TIMESTAMP,ContextTokens,GeneratedTokens\n1.0,10,2\n2.0,10,2\n3.0,-4,2\n",
                        ":4: ContextTokens is negative"),
    "missing column": ("TIMESTAMP,ContextTokens\n1.0,10\n", ":1: missing column(s) GeneratedTokens"),
    "short row": ("TIMESTAMP,ContextTokens,GeneratedTokens\n1.0,10\n", ":2: expected 3 fields"),
    "not a number": ("TIMESTAMP,ContextTokens,GeneratedTokens\n1.0,ten,2\n", ":2: ContextTokens 'ten'"),
    # Each of these mixes was read as if the kinds agreed: a bare date-time as this machine's local time.
    "zones mixed": ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,10,2\n"
                    "2023-11-16 18:00:05+01:00,10,2\n", ":3: TIMESTAMP '2023-11-16 18:00:05+01:00' is a date-time "
                                                        "with a time zone, but line 2's is a date-time without"),
    "mooncake not json": ('{"timestamp": 0, "input_length": 10, "output_length": 2}\n{"timestamp": 5,\n',
                          ":2: not a JSON object"),
    "mooncake missing key": ('{"timestamp": 0, "input_length": 10}\n', ":1: missing key(s) output_length"),
    "mooncake count not an integer": ('{"timestamp": 0, "input_length": true, "output_length": 2}\n',
                                      ":1: input_length True is not an integer"),
    "mooncake timestamp a string": ('{"timestamp": "soon", "input_length": 1, "output_length": 2}\n',
                                    ":1: timestamp 'soon' is not a finite number of milliseconds"),
    "burstgpt negative": ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                          "5,ChatGPT,-3,18,15,Conversation log\n", ":2: Request tokens is negative"),
    "seconds and dates": ("TIMESTAMP,ContextTokens,GeneratedTokens\n1700157600,10,2\n2023-11-16T18:00:05Z,10,2\n",
                          ":3: TIMESTAMP '2023-11-16T18:00:05Z' is a date-time with a time zone, but line 2's is "
                          "plain seconds"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_traces_name_the_line(case: str, tmp_path: Path) -> None:
    text, message = MALFORMED[case]
    path = tmp_path / "trace.csv"
    path.write_text(text)
    with pytest.raises(TraceError, match=re.escape(message)):
        load_trace(path)


def test_a_trace_without_time_zones_keeps_its_spacing_across_a_clock_change(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Read as local time on a machine in New York, 01:59 to 02:01 on 5 November 2023 was an hour and two
    minutes, the clocks falling back between them: the second request arrived an hour late."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        path = tmp_path / "trace.csv"
        path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-05 01:59:00,10,2\n2023-11-05 02:01:00,10,2\n")
        assert [r.offset for r in load_trace(path)] == [0.0, 120.0]
    finally:
        monkeypatch.undo()
        time.tzset()


def test_burstgpt_and_mooncake_logs_replay_as_they_were_logged(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Two more public request logs (docs/sources.md): BurstGPT's CSV, in seconds, its failed requests
    logged with 0 response tokens; Mooncake's JSON lines, in milliseconds, with block hashes not read."""
    burst = tmp_path / "burstgpt.csv"
    burst.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                     "5,ChatGPT,472,18,490,Conversation log\n45,GPT-4,1087,0,1087,API log\n8,ChatGPT,30,7,37,API log\n")
    assert load_trace(burst) == [TraceRow(0.0, 472, 18), TraceRow(3.0, 30, 7), TraceRow(40.0, 1087, 0)]
    moon = tmp_path / "mooncake.jsonl"
    moon.write_text('{"timestamp": 0, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47]}\n\n'
                    '{"timestamp": 27482, "input_length": 6472, "output_length": 26, "hash_ids": [46, 52]}\n')
    assert load_trace(moon) == [TraceRow(0.0, 6955, 52), TraceRow(27.482, 6472, 26)]
    code = main(["simulate", "replay", "--trace", str(moon), "--output", "json"])
    out = capsys.readouterr().out
    assert code == 0 and '"completed": 2' in out, out


def test_replay_command_rejects_a_bad_trace_and_writes_nothing(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "trace.csv"
    path.write_text(MALFORMED["negative tokens"][0])
    records = tmp_path / "records.csv"
    code = main(["simulate", "replay", "--trace", str(path), "--records", str(records)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and ":4: ContextTokens is negative" in err and "Traceback" not in err
    assert not records.exists()


def test_replay_command_writes_every_record(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    records = tmp_path / "records.csv"
    code = main(["simulate", "replay", "--trace", str(AZURE), "--window", "120", "--records", str(records),
                 "--output", "json", "--workload", "chat"])
    out = capsys.readouterr().out
    assert code == 0
    n = len(window(load_trace(AZURE), 0, 120))
    assert f'"completed": {n}' in out
    assert len(records.read_text().splitlines()) == n + 1


def test_the_chat_trace_has_short_prompts_short_answers_and_no_sessions() -> None:
    rows = chat_trace(20.0, 3_600.0, seed=3)
    prompts = [r.context_tokens for r in rows]
    answers = [r.generated_tokens for r in rows]
    assert 960 < statistics.median(prompts) < 1_080 and 1_090 < statistics.mean(prompts) < 1_210
    assert 122 < statistics.median(answers) < 138 and 195 < statistics.mean(answers) < 225
    assert max(prompts) <= CHAT_TRACE.prompt_max and min(answers) >= 1
    long = chat_trace(5.0, 8 * 3_600.0, seed=3)  # some hundred bursts: the mean rate holds
    assert abs(len(long) / (8 * 3_600.0) / 5.0 - 1) < 0.1
    replay = TraceReplay(rows)
    assert all(replay.pop().session == "" for _ in range(100))  # no session: nothing reused across requests
    assert rows == chat_trace(20.0, 3_600.0, seed=3) and rows != chat_trace(20.0, 3_600.0, seed=4)


def test_the_chat_trace_bursts_where_poisson_arrivals_would_not() -> None:
    def busiest_minute(times: list[float]) -> float:
        counts = collections.Counter(int(t // 60) for t in times)
        return max(counts.values()) / (len(times) / (max(times) / 60))

    chat = [r.offset for r in chat_trace(20.0, 7_200.0, seed=5)]
    plain = list(itertools.takewhile(lambda t: t < 7_200.0, poisson(20.0, random.Random(5))))
    assert busiest_minute(chat) > 1.35  # bursts at 1.6x the calm rate
    assert busiest_minute(plain) < 1.15


def test_a_chat_trace_needs_a_rate_and_a_duration() -> None:
    with pytest.raises(UserError, match="rate and a duration"):
        chat_trace(0.0, 60.0)


def test_a_closed_loop_keeps_its_users_when_requests_are_refused() -> None:
    """A session whose turn outgrew the replica's KV pool was refused and never resumed: its user sat idle for
    the rest of the run, so a sweep ran at less concurrency than its table reported."""
    loop = ClosedLoop(shape("coding-agent"), concurrency=4, seed=1)
    fleet = Fleet(loop, seed=1)
    fleet.add_replica(ReplicaConfig(tp=8, num_gpu_blocks=5_000))  # 80K tokens: long sessions outgrow it
    finished = fleet.run_until(1_800)
    assert len(fleet.rejected) >= 10 and len(finished) > 0
    # Every user still sends in the last ten minutes (a session is named after its user: "c<user>-<n>").
    late = [r.spec for r in finished if r.spec.arrival > 1_200] + [s for s in fleet.rejected if s.arrival > 1_200]
    assert {spec.session.split("-")[0] for spec in late} == {"c0", "c1", "c2", "c3"}
