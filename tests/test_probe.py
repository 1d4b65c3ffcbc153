"""Chapter 01: parsers against real nvidia-smi outputs (captured on 2x H200), profiles, the what-if with a real
engine, the no-GPU path of this machine, secret masking, and the recorded H200 runs."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import pytest

from servebook import probe as sbp
from servebook.errors import ParameterError
from servebook.paths import data_dir
from servebook.profiles import list_profiles, load_profile, sm_family

SMI = Path(__file__).parent / "data" / "nvidia-smi"  # captured by data/runs/h200x2-probe/capture.sh
RUNS = data_dir() / "runs" / "h200x2-probe"
HAS_GPU = shutil.which("nvidia-smi") is not None


# -- parsers, real outputs ----------------------------------------------------------------------
def test_query_csv_real():
    rows = sbp.parse_query_csv((SMI / "query-gpu.csv").read_text(), sbp._QUERY)
    assert [r["name"] for r in rows] == ["NVIDIA H200", "NVIDIA H200"]
    r = rows[0]
    assert r["compute_cap"] == "9.0" and r["memory.total"] == 143771 and r["power.limit"] == 700.0
    assert r["mig.mode.current"] == "Disabled" and r["ecc.mode.current"] == "Enabled"
    assert r["driver_version"] == "580.159.04" and r["uuid"].startswith("GPU-")
    # the same query with its header line gives the same rows (units stay in the values there)
    with_header = sbp.parse_query_csv((SMI / "query-gpu-header.csv").read_text(), sbp._QUERY)
    assert [r["name"] for r in with_header] == ["NVIDIA H200", "NVIDIA H200"]


def test_topo_matrix_real():
    topo = sbp.parse_topo_matrix((SMI / "topo-m.txt").read_text())  # has ANSI underline codes in its header
    assert topo["labels"] == ["GPU0", "GPU1"]
    assert topo["matrix"] == [["X", "NV18"], ["NV18", "X"]]
    assert topo["affinity"]["GPU1"] == {"cpu_affinity": "0-31", "numa_affinity": "0", "gpu_numa_id": "N/A"}
    assert "NV#" in topo["legend"] and "SYS" in topo["legend"]
    assert sbp.link_rank("NV18") > sbp.link_rank("PIX") > sbp.link_rank("PXB") > sbp.link_rank("PHB") > sbp.link_rank("NODE") > sbp.link_rank("SYS")
    assert sbp.describe_link("NV18") == "NVLink, 18 bonded links"


def test_topo_p2p_real():
    p2p = sbp.parse_topo_p2p((SMI / "topo-p2p-r.txt").read_text())
    assert p2p["labels"] == ["GPU0", "GPU1"] and p2p["matrix"] == [["X", "OK"], ["OK", "X"]]
    assert p2p["legend"]["CNS"] == "Chipset not supported"


def test_smi_xml_real():
    x = sbp.parse_smi_xml((SMI / "nvidia-smi-q.xml").read_text())
    assert x["driver_version"] == "580.159.04" and x["cuda_version"] == "13.0"
    assert len(x["gpus"]) == 2
    g = x["gpus"][0]
    assert g["name"] == "NVIDIA H200" and g["memory_total_mib"] == 143771
    assert g["mig_mode"] == "Disabled" and g["ecc_mode"] == "Enabled" and g["power_limit_w"] == 700.0
    assert g["clocks"]["max_sm_mhz"] == 1980.0


def test_topo_matrix_with_nics_and_sockets():
    # constructed in nvidia-smi's layout (4 GPUs, two sockets, one NIC) to cover codes the H200 host lacks
    text = ("\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
            "GPU0\t X \tPIX\tSYS\tSYS\tPXB\t0-15\t0\t\tN/A\n"
            "GPU1\tPIX\t X \tSYS\tSYS\tPXB\t0-15\t0\t\tN/A\n"
            "GPU2\tSYS\tSYS\t X \tNODE\tSYS\t16-31\t1\t\tN/A\n"
            "GPU3\tSYS\tSYS\tNODE\t X \tSYS\t16-31\t1\t\tN/A\n"
            "NIC0\tPXB\tPXB\tSYS\tSYS\t X \t\t\t\t\n\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n  NIC0: mlx5_0\n")
    topo = sbp.parse_topo_matrix(text)
    assert topo["labels"] == ["GPU0", "GPU1", "GPU2", "GPU3", "NIC0"]
    assert topo["matrix"][2][3] == "NODE" and topo["matrix"][0][1] == "PIX"
    assert topo["affinity"]["GPU3"]["cpu_affinity"] == "16-31" and topo["affinity"]["GPU3"]["numa_affinity"] == "1"
    assert topo["nics"] == {"NIC0": "mlx5_0"}
    one = sbp._restrict_topology(topo, [{"host_index": 2}, {"host_index": 3}])  # CUDA_VISIBLE_DEVICES=2,3
    assert [l for l in one["labels"] if l.startswith("GPU")] == ["GPU2", "GPU3"] and one["matrix"][0][:2] == ["X", "NODE"]


# -- profiles -----------------------------------------------------------------------------------
def test_profiles_have_sources():
    names = list_profiles()
    for want in ("a100", "h100", "h200", "b200", "b300", "gb200", "rtx-pro-6000", "rtx-5090", "l40s"):
        assert want in names
    for name in names:
        p = load_profile(name)
        for field in ("name", "gpu_name", "capability", "family", "memory_gib", "memory_bandwidth_tbs", "tdp_w", "cuda_version"):
            assert p.get(field) is not None, (name, field)
        for field in ("capability", "memory_gib", "memory_bandwidth_tbs", "tdp_w", "cuda_version", "interconnect"):
            assert p["sources"].get(field, "").startswith("https://"), (name, field)
        if p.get("sm_count") is not None:
            assert p["sources"]["sm_count"].startswith("https://"), name


def test_sm_family_and_profiles():
    assert load_profile("rtx-pro-6000")["capability"] == "12.0"
    f = sm_family(12, 0)
    assert f["sm"] == "sm_120" and "Blackwell" in f["arch"] and "RTX PRO 6000 Blackwell" in f["names"] and f["datacenter"] is False
    assert sm_family(10, 3)["sm"] == "sm_103" and "B300" in sm_family(10, 3)["names"]
    assert "H200" in sm_family(9, 0)["names"] and sm_family(12, 1)["names"] == ["DGX Spark (GB10)"]
    assert sm_family(13, 0)["known"] is False
    assert load_profile("RTX_PRO_6000")["profile"] == "rtx-pro-6000"


def test_unknown_profile_error():
    with pytest.raises(ParameterError) as err:
        load_profile("x200")
    msg = str(err.value)
    assert "\n" not in msg and "x200" in msg and "rtx-pro-6000" in msg and "h200" in msg
    from servebook.probe.cli import main

    assert main(["--profile", "x200"]) == 2


# -- judging the engines' answers (the seed case) -----------------------------------------------
def _gpu(cap: str) -> dict:
    return sbp._finish_gpu({"capability": cap, "name": "test"})


def test_judge_seed_case():
    g = _gpu("12.0")
    h = sbp.judge_helper({"name": "sglang.srt.utils.common.is_sm100_supported()", "answer": False}, g, 8, "12.8")
    assert h["verdict"] == "gap"
    assert "Blackwell" in h["meaning"] and "capability 12.0" in h["meaning"] and "is_sm100_supported() answers False" in h["meaning"]
    assert "will not run here" in h["meaning"]
    bad = sbp.judge_helper({"name": "x.is_sm120_supported()", "answer": False}, g, 8, "12.4")
    assert bad["verdict"] == "mismatch" and "CUDA 12.4" in bad["meaning"]
    assert sbp.judge_helper({"name": "current_platform.has_device_capability(90)", "answer": True}, g, 8)["verdict"] == "agrees"
    assert sbp.judge_helper({"name": "current_platform.is_device_capability(100)", "answer": False}, g, 8)["verdict"] == "agrees"
    assert sbp.judge_helper({"name": "current_platform.get_device_capability()", "answer": [10, 0]}, g, 8)["verdict"] == "mismatch"
    h100 = sbp.judge_helper({"name": "x.is_sm100_supported()", "answer": False}, _gpu("9.0"), 2)
    assert h100["verdict"] == "agrees"  # a Hopper GPU is simply not Blackwell: no gap


# -- real calls on this machine -----------------------------------------------------------------
def test_profile_whatif_with_real_engine():
    r = sbp.probe("rtx-pro-6000", engines=("transformers",), gpu_count=2)
    assert r["source"] == "profile" and r["profile"] == "rtx-pro-6000" and r["gpu_count"] == 2
    g = r["gpus"][0]
    assert g["capability"] == "12.0" and g["family"].startswith("sm_120 Blackwell") and g["source"] == "profile"
    assert r["topology"]["matrix"][0][1] == "SYS" and "assumed" in r["topology"]["note"]
    (tf,) = r["engines"]
    assert tf["status"] == "ok", tf
    assert "torch.cuda.get_device_capability" in tf["patched"]
    answers = {h["name"].split(".")[-1]: h for h in tf["helpers"]}
    assert answers["is_torch_cuda_available()"]["answer"] is True  # the engine's own helper sees the faked GPU
    assert answers["is_torch_bf16_gpu_available()"]["verdict"] == "agrees"
    assert r["warnings"][0].startswith("what-if from the profile 'rtx-pro-6000'")
    assert "datacenter line" in sbp.describe_host(r)
    assert "PROFILE rtx-pro-6000" in sbp.format_report(r)


@pytest.mark.skipif(HAS_GPU, reason="this host has a GPU; the no-GPU path is covered on CPU-only machines (CI)")
def test_no_gpu_real():
    r = sbp.probe(engines=("vllm",))
    assert r["source"] == "measured" and r["gpu_count"] == 0 and r["gpus"] == []
    assert any(w.startswith("no NVIDIA GPU found") for w in r["warnings"])
    assert r["p2p"]["note"] == "no GPU" and r["topology"]["matrix"] == []
    assert r["versions"]["torch"] and r["versions"]["python"]
    assert "no NVIDIA GPU" in sbp.describe_host(r)
    json.dumps(r)  # the --json schema is plain JSON
    assert "GPUs: none found" in sbp.format_report(r)


def test_engine_installed_but_failing_import(tmp_path, monkeypatch):
    # an installed distribution whose import fails, as sglang 0.5.23 did on the H200 machine (no starlette)
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'starlette'\")\n")
    dist = tmp_path / "sglang-0.0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.0.1\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    (res,) = sbp.engine_helpers([], engines=("sglang",))
    assert res["status"] == "import failed" and res["version"] == "0.0.1" and "starlette" in res["error"]
    bad = sbp.engine_helpers([], engines=("vllm",), python=str(tmp_path / "no-python"))[0]
    assert bad["status"] == "error" and "no Python interpreter" in bad["error"]


def test_env_secrets_masked():
    env = {"HF_TOKEN": "hf_abcdefghijklmnop", "NCCL_PROTO": "LL", "SGLANG_API_KEY": "s3cr3t-value",
           "VLLM_URL": "http://user:pa55word@host/x", "HF_HOME": "/data/hf", "PATH": "/usr/bin", "TORCH_CUDA_ARCH_LIST": "9.0a"}
    out = sbp.collect_env(env)
    assert out["HF_TOKEN"] == "***" and out["SGLANG_API_KEY"] == "***"
    assert "pa55word" not in out["VLLM_URL"] and out["NCCL_PROTO"] == "LL" and out["HF_HOME"] == "/data/hf"
    assert "PATH" not in out and out["TORCH_CUDA_ARCH_LIST"] == "9.0a"


def test_cli_register_and_host():
    from servebook.probe.cli import register

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    register(sub)
    args = parser.parse_args(["probe", "--profile", "h200", "--json"])
    assert args.profile == "h200" and args.json and callable(args.func)
    with pytest.raises(ParameterError):
        sbp.probe(host="gpu-box")  # not local, ssh://... or replay:DIR


# -- the recorded H200 runs ----------------------------------------------------------------------
def test_recorded_h200_reports():
    two = json.loads((RUNS / "2gpu" / "probe.json").read_text())
    assert two["schema"] == sbp.SCHEMA and two["source"] == "measured" and two["gpu_count"] == 2
    assert {g["capability"] for g in two["gpus"]} == {"9.0"} and two["gpus"][0]["arch"] == "Hopper"
    assert two["topology"]["matrix"] == [["X", "NV18"], ["NV18", "X"]]
    assert two["p2p"]["access"] == [[None, True], [True, None]]
    assert all(p["bandwidth_gbs"] > 100 for p in two["p2p"]["pairs"])
    v = two["versions"]
    assert v["nccl"] == v["nccl_loaded"]["version"] == "2.28.9"
    one = json.loads((RUNS / "1gpu" / "probe.json").read_text())
    assert one["gpu_count"] == 1 and any("CUDA_VISIBLE_DEVICES=0" in w for w in one["warnings"])
    rows = [json.loads(l) for l in (RUNS / "2gpu" / "p2p.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and rows[0]["method"].startswith("unidirectional copy")


def test_a_helper_answering_a_version_string_is_judged_by_its_truthiness():
    from servebook.probe import judge_helper

    gpu = {"major": 12, "minor": 0, "arch": "Blackwell", "sm": "sm_120"}
    agrees = judge_helper({"name": "is_cuda()", "answer": "12.8"}, gpu, gpu_count=1, cuda="12.8")
    assert agrees["verdict"] == "agrees", agrees
    wrong = judge_helper({"name": "is_cuda()", "answer": None}, gpu, gpu_count=1, cuda="12.8")
    assert wrong["verdict"] == "mismatch", wrong


def test_memory_is_stated_in_its_source_unit():
    """A profile's memory is the datasheet's figure: stated in GB with where data/hardware quotes it from; a measured
    host's is NVML's MiB / 1024, stated in GiB."""
    runs = data_dir() / "runs"
    prof = json.loads((runs / "whatif-rtx-pro-6000-sglang-0.5.9" / "probe.json").read_text())
    text = sbp.describe_host(prof)
    assert ("96 GB each (the datasheet's figure in the datasheet's unit, GB, quoted in `data/hardware/rtx-pro-6000.json` "
            "from https://") in text and "the profile's field `memory_gib` holds that figure unconverted" in text
    assert "GiB" not in text and "mem GB" in sbp.format_report(prof)
    host = json.loads((runs / "h200x1-book" / "probe.json").read_text())
    assert " GiB each" in sbp.describe_host(host) and "datasheet" not in sbp.describe_host(host)


def test_helper_verdicts_are_worded_as_chapter_01_defines_them():
    """A gap is consistent with the hardware (is_sm100_supported() -> False on capability 12.0, as expected): the
    sentence never says it 'did not agree'; a mismatch says it contradicts the hardware. Counts tagged and recomputed."""
    from servebook.results import RunStore
    from servebook.stated import stated_on
    from servebook.quantities import QUANTITIES, pick

    store = RunStore(data_dir() / "runs" / "whatif-rtx-pro-6000-sglang-0.5.9")
    rows = store.rows("engine_helpers")
    text = sbp.say_helper_verdicts(rows, ["sglang 0.5.9"])
    assert "did not agree" not in text and "contradict" not in text
    assert "1</span> of them leaves this GPU out: `sglang.srt.utils.common.is_sm100_supported()` -> False, the hardware says False" in text
    assert "the answer is the hardware's" in text and "a gap)" in text
    for s in stated_on(text):
        assert pick(QUANTITIES[s.name], QUANTITIES[s.name].compute(store), s.of) == s.value, s
    bad = [r | {"verdict": "mismatch", "expected": True} for r in rows if r["helper"].endswith("is_sm100_supported()")]
    assert "1</span> of them contradicts it:" in sbp.say_helper_verdicts(bad, ["sglang 0.5.9"])


def test_torch_reads_each_gpus_sm_count_and_shared_memory_per_block(monkeypatch):
    """With NVML and nvidia-smi absent, a CUDA torch lists the GPUs; each row carries the SM count and the opt-in shared
    memory per block torch reads (an older torch without the attribute leaves it None)."""
    from types import SimpleNamespace

    from servebook.probe import gpus as g

    props = [SimpleNamespace(name="NVIDIA H200", major=9, minor=0, total_memory=143771 * 2**20, multi_processor_count=132,
                             shared_memory_per_block_optin=232448),
             SimpleNamespace(name="NVIDIA H200", major=9, minor=0, total_memory=143771 * 2**20, multi_processor_count=132)]
    fake = SimpleNamespace(cuda=SimpleNamespace(device_count=lambda: 2, get_device_properties=lambda i: props[i]))

    def absent(*a):
        raise RuntimeError("absent here")

    monkeypatch.setattr(g, "_nvml_gpus", absent)
    monkeypatch.setattr(g, "_smi_gpus", absent)
    monkeypatch.setattr(g, "_torch_cuda", lambda: (fake, None))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    rows, info = g.detect_gpus([])
    assert info["method"] == "torch"
    assert [(r["sm_count"], r["shared_memory_per_block_optin_bytes"], r["capability"]) for r in rows] == \
        [(132, 232448, "9.0"), (132, None, "9.0")]
