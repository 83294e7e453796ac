"""An eighth sweep of hostile inputs: the holes the seventh left. A resource or a policy whose aliases expand to a
billion values (nine aliases of nine: "billion laughs") hung `render`, `plan -f` and `explain -f` for ever, as soon
as a refusal quoted the value or the output carried it (`apiVersion`, `metadata.name`, `metadata.uid`, a policy's
`kind`), and one whose alias holds itself was taken; `metadata.uid` was rendered into the owner reference as
whatever it held (`[1, 2]`); a ServingPolicy with no `spec`, or one that is not a mapping, planned as a policy of
all defaults; a trace's date-time with both a fraction and a time zone lost its zone (two rows an hour apart were
replayed 0.1 s apart) or was refused (`...00.5Z`); `observe --source pods` counted a target named twice as two
replicas; `plan --cached-fraction` without `--prompt-tokens`, and `--fit-tp` without `--fit` or `--samples`, were
ignored; and an output path that is a symbolic link to nowhere (`--plot`, `crds --out`, `--reference`) failed only
after the work, in words that named no flag. Each is now refused in one line that names the flag or the file
(exit 2), with nothing written; a few valid inputs the fixes must keep taking are checked beside them. Since
added: a list flag with a value given twice (`fit --predict 2,8,2`), which printed its row twice."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from infertune_lab.sim.trace import load_trace
from tests.unit.test_cli_hostile_inputs import TRACE_HEADER, refused, write
from tests.unit.test_cli_inputs import run

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = (REPO / "examples" / "kimi-k2.6-b200.yaml").read_text()
POLICY = REPO / "policies" / "coding-agent.yaml"
SAMPLES = "batch,per_pass_ms\n1,5\n2,7\n4,11\n"

# Nine aliases of nine: a billion values, which PyYAML builds in a moment as shared references.
LAUGHS = "x-laughs:\n  a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10))


def laughing(text: str, old: str, new: str) -> str:
    """`text` with `old` replaced by `new` (which may name *a9), and the anchors defined at its top."""
    assert old in text
    return LAUGHS + text.replace(old, new, 1)


# --- a billion laughs, and an alias that holds itself ------------------------------------------------------
@pytest.mark.timeout(30)
@pytest.mark.parametrize(("command", "old", "new"), [
    # str() of the billion-value list, in the refusal that quotes it or in the owner reference rendered.
    ("render", "apiVersion: infertune.io/v1alpha1", "apiVersion: *a9"),
    ("plan", "  name: kimi-k2\n", "  name: *a9\n"),
    ("explain", "  namespace: inference\n", "  namespace: *a9\n"),
    ("render", "  name: kimi-k2\n", "  name: kimi-k2\n  uid: *a9\n"),
], ids=["apiVersion", "name", "namespace", "uid"])
def test_a_resource_whose_aliases_expand_to_a_billion_values_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str, old: str, new: str) -> None:
    """sigs.k8s.io/yaml refuses such a document ("excessive aliasing"): kubectl never sends it."""
    resource = write(tmp_path / "r.yaml", laughing(EXAMPLE, old, new))
    code, out, err = run(capsys, command, "-f", resource, "--policy", str(POLICY))
    assert refused(code, out, err, "--file", "r.yaml", "aliases expand", "1,000,000"), err


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("old", "new"), [
    ("kind: ServingPolicy", "kind: *a9"),
    ("apiVersion: infertune.io/v1alpha1", "apiVersion: *a9"),
], ids=["kind", "apiVersion"])
def test_a_policy_whose_aliases_expand_to_a_billion_values_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, old: str, new: str) -> None:
    policy = write(tmp_path / "p.yaml", laughing(POLICY.read_text(), old, new))
    code, out, err = run(capsys, "render", "-f", write(tmp_path / "r.yaml", EXAMPLE), "--policy", policy)
    assert refused(code, out, err, "--policy", "p.yaml", "aliases expand"), err


def test_an_alias_that_holds_itself_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`metadata: &m {labels: *m}` was rendered (exit 0); go-yaml refuses it ("anchor 'm' value contains itself")."""
    resource = write(tmp_path / "r.yaml", EXAMPLE.replace("metadata:\n  name: kimi-k2\n",
                                                          "metadata: &m\n  labels: *m\n  name: kimi-k2\n"))
    code, out, err = run(capsys, "render", "-f", resource, "--policy", str(POLICY))
    assert refused(code, out, err, "--file", "r.yaml: line ", "holds itself"), err


def test_anchors_aliases_and_merge_keys_are_still_read(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    resource = "x-engine: &engine\n  kind: vllm\nx-image: &image vllm/vllm-openai:v0.11.0\n" + EXAMPLE.replace(
        "  engine:\n    kind: vllm\n", "  engine:\n    <<: *engine\n").replace("image: vllm/vllm-openai:v0.11.0",
                                                                              "image: *image")
    code, out, err = run(capsys, "render", "-f", write(tmp_path / "r.yaml", resource), "--policy", str(POLICY))
    assert code == 0 and "image: vllm/vllm-openai:v0.11.0" in out, err


# --- metadata.uid ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("uid", ["[1, 2]", "5", '""', "null", '"a\\nb"'])
def test_a_uid_that_is_not_one_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, uid: str) -> None:
    """It was rendered into every object's owner reference as str() made it: `uid: '[1, 2]'`, `'None'`, `''`."""
    resource = write(tmp_path / "r.yaml", EXAMPLE.replace("  name: kimi-k2\n", f"  name: kimi-k2\n  uid: {uid}\n"))
    code, out, err = run(capsys, "render", "-f", resource, "--policy", str(POLICY))
    assert refused(code, out, err, "r.yaml", "metadata.uid"), err


def test_a_uid_the_api_server_gave_is_still_rendered(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    uid = "4f9c1a2e-7b3d-4e8f-9a0b-1c2d3e4f5a6b"
    resource = write(tmp_path / "r.yaml", EXAMPLE.replace("  name: kimi-k2\n", f"  name: kimi-k2\n  uid: {uid}\n"))
    code, out, err = run(capsys, "render", "-f", resource, "--policy", str(POLICY))
    assert code == 0 and f"uid: {uid}" in out, err


# --- a ServingPolicy without a spec ----------------------------------------------------------------------------
@pytest.mark.parametrize("spec", ["", "spec:\n", "spec: []\n", "spec: 7\n", "spec: ''\n"])
def test_a_policy_whose_spec_is_missing_or_not_a_mapping_is_refused(capsys: pytest.CaptureFixture[str],
                                                                    tmp_path: Path, spec: str) -> None:
    """Each read as a policy of all defaults: no SLO, no workload, planned without a word. The CRD requires a
    spec that is an object, so the API server refuses each."""
    policy = write(tmp_path / "p.yaml", "apiVersion: infertune.io/v1alpha1\nkind: ServingPolicy\n"
                                        "metadata: {name: coding-agent}\n" + spec)
    code, out, err = run(capsys, "plan", "-f", write(tmp_path / "r.yaml", EXAMPLE), "--policy", policy)
    assert refused(code, out, err, "--policy", "p.yaml", "spec"), err


def test_a_mapping_that_is_no_policy_at_all_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`{1: 2}` has no kind (read as a ServingPolicy's) and no spec: it planned as the defaults."""
    policy = write(tmp_path / "p.yaml", "{1: 2}\n")
    code, out, err = run(capsys, "render", "-f", write(tmp_path / "r.yaml", EXAMPLE), "--policy", policy)
    assert refused(code, out, err, "--policy", "spec"), err


def test_a_policy_with_an_empty_spec_is_still_read(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    policy = write(tmp_path / "p.yaml", "apiVersion: infertune.io/v1alpha1\nkind: ServingPolicy\nspec: {}\n")
    code, out, err = run(capsys, "render", "-f", write(tmp_path / "r.yaml", EXAMPLE), "--policy", policy)
    assert code == 0 and "kind: Deployment" in out, err


# --- a trace's date-time with a fraction and a time zone -----------------------------------------------------
def test_a_trace_date_time_with_a_fraction_keeps_its_time_zone(tmp_path: Path) -> None:
    """The fraction was cut to six digits with the zone after it: `.100000001+01:00` became `.100000`, read as
    UTC, so two rows an hour apart (either side of a daylight-saving change) were replayed 0.1 s apart."""
    trace = write(tmp_path / "t.csv", TRACE_HEADER + "2023-10-29T02:30:00.100000001+02:00,100,10\n"
                                                     "2023-10-29T02:30:00.200000001+01:00,100,10\n")
    rows = load_trace(trace)
    assert [round(r.offset, 6) for r in rows] == [0.0, 3600.1]


@pytest.mark.parametrize("stamp", ["2023-11-16T10:00:00.5Z", "2023-11-16T10:00:00.5+00:00",
                                   "2023-11-16T10:00:00.5-05:00", "2023-11-16 10:00:00.1234567+01:00"])
def test_a_trace_date_time_with_a_fraction_and_a_zone_is_read(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                              stamp: str) -> None:
    """ISO 8601 date-times that a log exporter writes were refused ("is not a date-time or seconds")."""
    trace = write(tmp_path / "t.csv", TRACE_HEADER + f"{stamp},100,10\n2023-11-16T10:00:01Z,100,10\n")
    code, out, err = run(capsys, "simulate", "replay", "--trace", trace, "--output", "json")
    assert code == 0 and '"completed": 2' in out, err


def test_a_zoned_fraction_beside_a_bare_one_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """With its zone read, the first row is a zoned date-time: the second, without one, cannot be placed."""
    trace = write(tmp_path / "t.csv", TRACE_HEADER + "2023-11-16T10:00:00.5+02:00,100,10\n"
                                                     "2023-11-16T10:00:01.5,100,10\n")
    code, out, err = run(capsys, "simulate", "replay", "--trace", trace)
    assert refused(code, out, err, "t.csv:3", "without a time zone", "line 2's is a date-time with a time zone"), err


def test_a_trace_of_bare_fractions_is_still_read(tmp_path: Path) -> None:
    """Azure's own layout: seven fractional digits, no zone."""
    trace = write(tmp_path / "t.csv", TRACE_HEADER + "2023-11-16 18:15:46.6805900,100,10\n"
                                                     "2023-11-16 18:15:50.0477600,100,10\n")
    assert [round(r.offset, 6) for r in load_trace(trace)] == [0.0, 3.367170]


# --- observe: a target named twice ---------------------------------------------------------------------------
@pytest.mark.parametrize(("targets", "says"), [
    # Scraped twice and counted as two replicas: the running streams and the KV read double.
    ("127.0.0.1:1,127.0.0.1:1", "http://127.0.0.1:1/metrics is named twice"),
    ("127.0.0.1:1,http://127.0.0.1:1/metrics", "http://127.0.0.1:1/metrics is named twice"),
    # One pod at two addresses: which one it is is not ours to guess.
    ("ns/dep/pod=127.0.0.1:1,ns/dep/pod=127.0.0.1:2", "pod ns/dep/pod is named twice"),
])
def test_observe_refuses_a_target_named_twice(capsys: pytest.CaptureFixture[str], targets: str, says: str) -> None:
    code, out, err = run(capsys, "observe", "--source", "pods", "--targets", targets, "--interval", "0",
                         "--timeout", "1")
    assert refused(code, out, err, "--targets", says), err


def test_observe_still_reads_two_targets(capsys: pytest.CaptureFixture[str]) -> None:
    """Two pods not listening: a fault the output reports (exit 1), not a refusal."""
    code, out, err = run(capsys, "observe", "--source", "pods", "--targets", "127.0.0.1:1,127.0.0.1:2",
                         "--interval", "0", "--timeout", "1")
    assert code == 1 and err == "" and "2 queries" in out, err


# --- plan: flags that were ignored -------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [[], ["--workload", "chat"]])
def test_plan_refuses_a_cached_fraction_without_a_prompt(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """A preset's cached share is its own: `--cached-fraction 0.9` planned exactly as without it."""
    code, out, err = run(capsys, "plan", "--model", "llama-3.1-8b", "--cached-fraction", "0.9", *argv)
    assert refused(code, out, err, "--cached-fraction", "--prompt-tokens"), err


def test_plan_still_takes_a_cached_fraction_of_a_prompt(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "plan", "--model", "llama-3.1-8b", "--prompt-tokens", "8000", "--output-tokens",
                         "500", "--cached-fraction", "0.9", "--output", "json")
    assert code in (0, 1) and '"feasible"' in out, err


@pytest.mark.parametrize("argv", [["--model", "llama-3.1-8b"], ["-f", "{example}", "--policy", "{policy}"]])
def test_plan_refuses_a_fit_tp_with_no_fit(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                           argv: list[str]) -> None:
    """`--fit-tp 1` alone says where a fit was measured, and no fit was given: it was ignored, exit 0."""
    example = write(tmp_path / "r.yaml", EXAMPLE)
    args = [a.format(example=example, policy=POLICY) for a in argv]
    code, out, err = run(capsys, "plan", *args, "--fit-tp", "4")
    assert refused(code, out, err, "--fit-tp", "--fit or --samples"), err


def test_plan_still_reads_samples_at_the_default_fit_tp(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    samples = write(tmp_path / "s.csv", "batch,per_pass_ms\n1,20\n8,25\n32,40\n")
    for extra in ([], ["--fit-tp", "8"]):
        code, out, err = run(capsys, "plan", "--model", "kimi-k2.6", "--samples", samples, *extra, "--output", "json")
        assert code in (0, 1) and '"feasible"' in out, err


# --- an output path that is a symbolic link to nowhere -------------------------------------------------------
def dangling(path: Path, to: Path) -> str:
    os.symlink(to, path)
    return str(path)


@pytest.mark.parametrize(("flag", "argv"), [
    # planned and printed the table, then "error: ...x.png No such file or directory" (no flag named), exit 2
    ("--plot", ["plan", "--model", "llama-3.1-8b", "--plot", "{link}.png"]),
    ("--reference", ["crds", "--reference", "{link}.md"]),
    ("--records", ["simulate", "replay", "--trace", "{trace}", "--records", "{link}.csv"]),
    # "error: ...out File exists": mkdir cannot make a directory where a link stands
    ("--out", ["crds", "--out", "{link}"]),
])
def test_an_output_that_is_a_link_to_nowhere_is_refused_before_any_work(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, argv: list[str]) -> None:
    trace = write(tmp_path / "t.csv", TRACE_HEADER + "0,100,10\n1,100,10\n")
    link = tmp_path / "out"
    args = [a.format(link=link, trace=trace) for a in argv]
    dangling(Path(args[-1]), tmp_path / "missing" / "target")
    code, out, err = run(capsys, *args)
    assert refused(code, out, err, flag, "is a symbolic link to", "which does not exist"), err
    assert not (tmp_path / "missing").exists()


def test_an_output_that_is_a_link_to_a_file_is_still_written(capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path) -> None:
    target = tmp_path / "target.md"
    target.write_text("old\n")
    link = tmp_path / "link.md"
    os.symlink(target, link)
    code, out, err = run(capsys, "crds", "--reference", str(link))
    assert code == 0 and "CustomResourceDefinition" in out, err


# --- a list flag with a value given twice --------------------------------------------------------------------
@pytest.mark.parametrize(("argv", "flag", "twice"), [
    # Each printed its row twice: a paste or a typo, not two rows wanted.
    (["fit", "--samples", "{samples}", "--predict", "2,8,2"], "--predict", "2"),
    (["simulate", "sweep", "--concurrency", "1,1", "--duration", "1"], "--concurrency", "1"),
    (["plan", "--tp", "4,8,4"], "--tp", "4"),
])
def test_a_list_flag_refuses_a_value_given_twice(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                 argv: list[str], flag: str, twice: str) -> None:
    samples = write(tmp_path / "s.csv", SAMPLES)
    code, out, err = run(capsys, *[a.format(samples=samples) for a in argv])
    assert refused(code, out, err, flag, f"{twice} is given twice"), err


def test_a_list_flag_with_distinct_values_is_still_taken(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    samples = write(tmp_path / "s.csv", SAMPLES)
    code, out, _ = run(capsys, "fit", "--samples", samples, "--predict", "16,2,8", "--output", "json")
    assert code == 0, out
    assert [row["batch"] for row in json.loads(out)["predictions"]] == [16, 2, 8]
