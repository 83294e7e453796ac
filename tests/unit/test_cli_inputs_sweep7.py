"""A seventh sweep of hostile inputs: the holes the sixth left. A kubeconfig that is not one, or a cluster that does
not answer, ended `explain NAME` and `run` in an internal error; `plan --fit` took a line of free batching or of
minute-long passes; `simulate` ran a TP the engine refuses; a trace took `1_000` tokens or a key given twice; and
`bench --report` and `demo --report` found a directory standing at one of their files only after every run, with
the others already written; `observe` ignored a setting of the other source; and `render`, `plan` and `explain -f`
read a resource or a policy of another API version (`infertune.io/v9`) as this one's, and a TP size listed twice;
`observe` took a target whose identity was left empty, and `simulate serve` empty names for its targets' labels.
Each is now refused in one line that names the flag or the file (exit 2), with nothing written; a few valid
inputs the fixes must keep taking are checked beside them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_cli_hostile_inputs import TRACE_HEADER, refused, write
from tests.unit.test_cli_inputs import run

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "kimi-k2.6-b200.yaml"
POLICY = REPO / "policies" / "coding-agent.yaml"


# --- a kubeconfig that is not one, a cluster that does not answer --------------------------------------------
def _kubeconfig(server: str, ca_data: str | None = None) -> str:
    ca = f", certificate-authority-data: {ca_data!r}" if ca_data is not None else ""
    return ("apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: c, cluster: {{server: {server!r}{ca}}}}}]\n"
            "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
            "users: [{name: u, user: {token: t}}]\ncurrent-context: x\n")


def use_kubeconfig(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """KUBECONFIG for the command; the client read the variable once, when it was imported, so its default too."""
    import kubernetes.config.kube_config

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", path)
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", path)


@pytest.mark.parametrize(("content", "says"), [
    # PyYAML's ParserError, UnicodeDecodeError, and the client's TypeErrors on a list or a string: each an
    # internal error ("a bug; rerun with INFERTUNE_TRACEBACK=1").
    (b"garbage: [\n", "ParserError"),
    (b"\x00\xff\xfe", "UnicodeDecodeError"),
    (b"- a\n- b\n", "TypeError"),
    (b"just a string\n", "TypeError"),
    (b"clusters: 5\ncontexts: 7\ncurrent-context: x\n", "TypeError"),
    # binascii.Error, raised while the client wrote the CA to a temporary file.
    (_kubeconfig("https://127.0.0.1:1", "!!!notbase64").encode(), "Invalid base64"),
], ids=["not-yaml", "binary", "a-list", "a-string", "wrong-types", "bad-ca-data"])
def test_explain_names_a_kubeconfig_that_is_not_one(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch, content: bytes,
                                                    says: str) -> None:
    """`run` reads the kubeconfig through the same function (it is not run in-process here: it configures the
    process-wide logging first)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_bytes(content)
    use_kubeconfig(monkeypatch, str(kubeconfig))
    code, out, err = run(capsys, "explain", "my-model", "-n", "default")
    assert refused(code, out, err, "no cluster to talk to", str(kubeconfig), "is not a kubeconfig", says), err


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("server", "says"), [
    # urllib3's MaxRetryError and LocationParseError reached the user as internal errors.
    ("https://127.0.0.1:1", "Connection refused"),
    ("not a url", "Failed to parse"),
], ids=["unreachable", "not-a-url"])
def test_explain_names_a_cluster_that_does_not_answer(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch, server: str, says: str) -> None:
    use_kubeconfig(monkeypatch, write(tmp_path / "kubeconfig", _kubeconfig(server)))
    code, out, err = run(capsys, "explain", "my-model", "-n", "default")
    assert refused(code, out, err, "cannot read InferenceDeployment default/my-model",
                   "the API server did not answer", says), err


# --- plan --fit ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("fit", "says"), [
    # Batching for free, refused in samples and load tests alike: planned at 357 tok/s a stream, exit 0.
    ("5,0", "the slope above 0 ms a stream"),
    # Passes of 100 s planned on ("0.0 tok/s per stream", feasible, exit 0).
    ("99999,1", "predicts a pass of 100,063 ms at batch 64"),
    ("59999,0.5", "predicts a pass of 60,031 ms at batch 64"),
])
def test_plan_refuses_a_fit_no_decode_step_follows(capsys: pytest.CaptureFixture[str], fit: str, says: str) -> None:
    code, out, err = run(capsys, "plan", "--fit", fit, "--fit-tp", "8", "--output", "json")
    assert refused(code, out, err, "--fit: ", says), err


def test_plan_still_takes_a_measured_fit(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--fit", "5.2,1.65"], ["--fit", "5.2,1.65", "--max-concurrency", "1024"]):
        code, out, err = run(capsys, "plan", *argv, "--fit-tp", "8", "--output", "json")
        assert code == 0 and err == "" and '"fit"' in out, err


# --- simulate --tp ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("sub", ["sweep", "replay", "serve"])
def test_simulate_refuses_a_tp_that_does_not_divide_the_heads(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                              sub: str) -> None:
    """TP64 of a 32-head model was simulated (exit 0), a replica vLLM will not start; `plan --tp` refuses it."""
    records = tmp_path / "records.csv"
    extra = {"sweep": ["--concurrency", "1", "--duration", "1"],
             "replay": ["--trace", write(tmp_path / "t.csv", TRACE_HEADER + "0,100,10\n"), "--records", str(records)],
             "serve": ["--duration", "1"]}[sub]
    code, out, err = run(capsys, "simulate", sub, "--model", "llama-3.1-8b", "--tp", "64", *extra)
    assert refused(code, out, err, "--tp: TP64 does not divide the 32 attention heads of llama-3.1-8b"), err
    assert not records.exists()


def test_simulate_names_the_heads_not_the_kv_for_kimi_at_tp3(capsys: pytest.CaptureFixture[str]) -> None:
    """It said "kimi-k2.6 does not fit on 3x b200: no KV blocks left", which is not why."""
    code, out, err = run(capsys, "simulate", "sweep", "--tp", "3", "--concurrency", "1", "--duration", "1")
    assert refused(code, out, err, "--tp: TP3 does not divide the 64 attention heads"), err


# --- traces ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("rows", "says"), [
    # Read as 1,000 tokens, 12 tokens and 10 s: a paste replayed without a word.
    ("0,1_000,10\n1,100,10\n", ":2: ContextTokens '1_000' is not an integer"),
    ("0,\u0661\u0662,10\n1,100,10\n", ":2: ContextTokens '\u0661\u0662' is not an integer"),
    ("1_0,100,10\n1,100,10\n", ":2: TIMESTAMP '1_0' is not a date-time or seconds"),
    ("\u0661,100,10\n1,100,10\n", ":2: TIMESTAMP '\u0661' is not a date-time or seconds"),
])
def test_a_trace_number_not_plainly_written_is_refused_at_its_line(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path, rows: str, says: str) -> None:
    trace = write(tmp_path / "trace.csv", TRACE_HEADER + rows)
    records = tmp_path / "records.csv"
    code, out, err = run(capsys, "simulate", "replay", "--trace", trace, "--records", str(records))
    assert refused(code, out, err, "trace.csv", says), err
    assert not records.exists()


@pytest.mark.parametrize(("line", "says"), [
    # json.loads kept the last "timestamp": the replay ran 99,999 s, exit 0.
    ('{"timestamp": 0, "input_length": 100, "output_length": 10, "timestamp": 99999999}',
     ":1: key 'timestamp' is given twice in one object"),
    ('{"timestamp": 0, "input_length": "1_000", "output_length": 10}', ":1: input_length '1_000' is not an integer"),
])
def test_a_mooncake_line_read_two_ways_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, line: str,
                                                  says: str) -> None:
    trace = write(tmp_path / "trace.jsonl", line + '\n{"timestamp": 1000, "input_length": 100, "output_length": 10}\n')
    code, out, err = run(capsys, "simulate", "replay", "--trace", trace, "--output", "json")
    assert refused(code, out, err, "trace.jsonl", says), err


def test_a_plainly_written_trace_is_still_replayed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    csv = write(tmp_path / "trace.csv", TRACE_HEADER + " 0 , +100 ,10\r\n1.5e0,100, 10 \r\n")
    jsonl = write(tmp_path / "trace.jsonl", '{"timestamp": 0, "input_length": 100, "output_length": "10"}\n'
                                            '{"timestamp": 1500, "input_length": 100, "output_length": 10}\n')
    for trace in (csv, jsonl):
        code, out, err = run(capsys, "simulate", "replay", "--trace", trace, "--output", "json")
        assert code == 0 and '"completed": 2' in out, err


# --- bench --report: every file it writes, by name, before the runs ---------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize(("argv", "name"), [
    ([], "bench.md"),
    ([], "bench-drop.png"),
    (["--frontier"], "bench-drop-frontier.png"),
])
def test_bench_refuses_a_directory_where_its_report_writes_a_file_before_any_run(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], name: str) -> None:
    """A directory at report/bench.md: the benchmark ran, printed its table, wrote bench-drop.png, then ended in
    "R/bench.md Is a directory" (exit 2): a partial report, after all the work."""
    report = tmp_path / "report"
    (report / name).mkdir(parents=True)
    (report / "notes.txt").write_text("the user's\n")
    code, out, err = run(capsys, "bench", "--scenario", "drop", "--duration", "60", "--policies", "static",
                         "--processes", "1", *argv, "--report", str(report))
    assert refused(code, out, err, "--report", str(report / name), "is a directory, not a file"), err
    assert sorted(p.name for p in report.iterdir()) == sorted([name, "notes.txt"])
    assert (report / "notes.txt").read_text() == "the user's\n"


def test_bench_with_a_trace_names_its_plot_after_the_trace(capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path) -> None:
    trace = write(tmp_path / "azure.csv", TRACE_HEADER + "0,100,10\n")
    report = tmp_path / "report"
    (report / "bench-azure.png").mkdir(parents=True)
    code, out, err = run(capsys, "bench", "--trace", trace, "--policies", "static", "--report", str(report))
    assert refused(code, out, err, "--report", "bench-azure.png", "is a directory, not a file"), err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["report.md", "summary.json", "kv.png", "operator.log"])
def test_demo_refuses_a_directory_where_its_report_writes_a_file_before_it_runs(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str) -> None:
    """A directory at report/report.md: the demo ran its 45 s, wrote operator.log, the four plots and summary.json,
    then ended in "D/report.md Is a directory" (exit 2)."""
    report = tmp_path / "report"
    (report / name).mkdir(parents=True)
    code, out, err = run(capsys, "demo", "--fast", "--no-prometheus", "--report", str(report))
    assert refused(code, out, err, "--report", str(report / name), "is a directory, not a file"), err
    assert [p.name for p in report.iterdir()] == [name]


# --- observe: a flag of the other source ------------------------------------------------------------------
@pytest.mark.parametrize(("argv", "flag"), [
    # The pods keep no history: `--fit-history 2h` (or 99999999y) was ignored, exit 1 on the unreachable pod.
    (["--source", "pods", "--targets", "127.0.0.1:1", "--interval", "0", "--fit-history", "2h"], "--fit-history"),
    # Prometheus computes the rates itself: `--interval 60` was ignored.
    (["--source", "prometheus", "--url", "http://127.0.0.1:1", "--interval", "60"], "--interval"),
])
def test_observe_refuses_a_setting_of_the_other_source(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                       flag: str) -> None:
    code, out, err = run(capsys, "observe", *argv, "--timeout", "1")
    assert refused(code, out, err, flag, "does not go with --source"), err


def test_observe_keeps_each_sources_own_default(capsys: pytest.CaptureFixture[str]) -> None:
    """Prometheus' history of 30m at the 1m window, far inside its 11,000 points; an unreachable source is a
    fault the output reports (exit 1), not a refusal."""
    code, out, err = run(capsys, "observe", "--source", "prometheus", "--url", "http://127.0.0.1:1", "--timeout", "1")
    assert code == 1 and err == "" and "SourceUnreachable" in out, err


# --- a resource or a policy of another API version -----------------------------------------------------------
@pytest.mark.parametrize("command", [["render"], ["plan"], ["explain"]])
def test_a_resource_of_another_api_version_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                       command: list[str]) -> None:
    """`infertune.io/v9` was read as v1alpha1's spec: a version this infertune does not serve, whose fields may not
    be this one's."""
    resource = write(tmp_path / "r.yaml", EXAMPLE.read_text().replace("infertune.io/v1alpha1", "infertune.io/v9"))
    code, out, err = run(capsys, *command, "-f", resource, "--policy", str(POLICY))
    assert refused(code, out, err, "apiVersion 'infertune.io/v9'", "infertune.io/v1alpha1"), err


def test_a_policy_of_another_api_version_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    policy = write(tmp_path / "p.yaml", POLICY.read_text().replace("infertune.io/v1alpha1", "infertune.io/v2"))
    code, out, err = run(capsys, "render", "-f", str(EXAMPLE), "--policy", policy)
    assert refused(code, out, err, "--policy", "apiVersion 'infertune.io/v2'"), err


def test_a_resource_of_this_api_version_is_still_rendered(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "render", "-f", str(EXAMPLE), "--policy", str(POLICY))
    assert code == 0 and "kind: Deployment" in out, err


# --- a TP size listed twice ----------------------------------------------------------------------------------
def test_a_tp_size_listed_twice_is_refused_in_a_resource(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """[8, 8] was taken (the repeat planned nothing twice, but which was meant is not a question to answer); the
    CRD's list type is now a set, so the API server refuses it too."""
    resource = write(tmp_path / "r.yaml", EXAMPLE.read_text().replace("tensorParallelSizes: [4, 8]",
                                                                      "tensorParallelSizes: [8, 4, 8]"))
    code, out, err = run(capsys, "render", "-f", resource, "--policy", str(POLICY))
    assert refused(code, out, err, "tensorParallelSizes[2]: 8 is listed twice"), err


def test_a_tp_size_listed_twice_is_refused_in_a_policy(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    policy = write(tmp_path / "p.yaml",
                   POLICY.read_text().replace("  tuning:\n", "  tuning:\n    tensorParallelSizes: [4, 4]\n", 1))
    code, out, err = run(capsys, "render", "-f", str(EXAMPLE), "--policy", policy)
    assert refused(code, out, err, "tensorParallelSizes[1]: 4 is listed twice"), err


def test_the_crds_list_tp_sizes_as_a_set() -> None:
    for crd in ("infertune.io_inferencedeployments.yaml", "infertune.io_servingpolicies.yaml"):
        text = (REPO / "crds" / crd).read_text()
        assert text.count("x-kubernetes-list-type: set") >= 1, crd


# --- names left empty ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["=127.0.0.1:1", " =127.0.0.1:1"])
def test_observe_refuses_a_target_whose_identity_is_left_empty(capsys: pytest.CaptureFixture[str],
                                                               target: str) -> None:
    """`=host:port` was read as `host:port`, the `=` dropped: an identity left out, not one to guess."""
    code, out, err = run(capsys, "observe", "--source", "pods", "--targets", target, "--interval", "0")
    assert refused(code, out, err, "expected namespace/deployment/pod=host:port"), err


@pytest.mark.parametrize(("flag", "value"), [("--namespace", ""), ("--deployment", ""), ("--namespace", "Not_A_NS"),
                                             ("--deployment", "sim-")])
def test_simulate_serve_refuses_a_label_no_deployment_could_carry(capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: Path, flag: str, value: str) -> None:
    """They label the pods in the file_sd targets; an empty one went in as it was, before any pod served."""
    targets = tmp_path / "targets.json"
    code, out, err = run(capsys, "simulate", "serve", "--duration", "1", "--targets-file", str(targets), flag, value)
    assert refused(code, out, err, flag, "is not a Kubernetes name"), err
    assert not targets.exists()
