"""The local model's own process: every shipped model answers through it on this CPU, the
safe setting is in force at every load, and a host that crashes, is killed or hangs fails
only the calls it was answering, then gives way to a fresh one."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from delegations.protocol.adapters.local import LocalAdapter
from delegations.protocol.adapters.local_host import HostCrashed, ModelHost, model_host
from delegations.protocol.adapters.local_models import SHIPPED_MODELS
from delegations.protocol.adapters.model_host import (
    extra_buffer_types_allowed,
    has_amx_kernels,
)
from delegations.protocol.errors import ErrorCode, ProtocolError

from .conftest import local_model_or_skip

ROOT = Path(__file__).resolve().parents[2]
STORY = [{"role": "user", "content": "Write a very long story about a lighthouse keeper."}]
AMX_BUILD = ("CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | "
             "LLAMAFILE = 1 | REPACK = 1 |")
SAFE_BUILD = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 1 | LLAMAFILE = 1 | REPACK = 1 |"


@pytest.fixture
def smollm2() -> Path:
    """The smaller shipped model: the faults below need a model, not a good one."""
    return local_model_or_skip("smollm2-135m")


def process_state(pid: int) -> str | None:
    """The kernel's state letter for ``pid`` (Z: a zombie), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def wait_gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if process_state(pid) is None:
            return True
        time.sleep(0.05)
    return False


async def host_writing_a_story() -> tuple[asyncio.Task[None], int]:
    """A long answer under way on SmolLM2, and the pid of the host writing it."""
    adapter = LocalAdapter({"model": "smollm2-135m", "max_tokens": 2000, "temperature": 0.8})
    started = asyncio.Event()

    async def on_text(text: str) -> None:
        started.set()

    call = asyncio.create_task(adapter.complete(STORY, [], on_text=on_text))
    await asyncio.wait_for(started.wait(), timeout=60)
    pid = model_host().pid
    assert pid is not None
    return call, pid


async def a_fresh_host_answers(old_pid: int) -> bool:
    turn = await LocalAdapter({"model": "smollm2-135m", "max_tokens": 8}).complete(
        [{"role": "user", "content": "Say hello."}], [])
    return turn.output_tokens > 0 and model_host().pid not in (None, old_pid)


def test_an_amx_build_loads_models_without_the_extra_buffer_types() -> None:
    assert has_amx_kernels(AMX_BUILD) and not extra_buffer_types_allowed(AMX_BUILD)
    assert not has_amx_kernels(SAFE_BUILD) and extra_buffer_types_allowed(SAFE_BUILD)


def test_the_build_options_leave_out_amx_and_keep_what_the_cpu_has(tmp_path: Path) -> None:
    def options(flags: str) -> set[str]:
        cpuinfo = tmp_path / "cpuinfo"
        cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        env = {k: v for k, v in os.environ.items() if k != "CMAKE_ARGS"}
        out = subprocess.run(["bash", "deploy/llama_cmake_args.sh"], cwd=ROOT, check=True,
                             capture_output=True, text=True, env={**env, "CPUINFO": str(cpuinfo)})
        return set(out.stdout.split())

    if os.uname().machine not in ("x86_64", "amd64"):
        pytest.skip("the options are chosen on x86-64 only")
    xeon = options("fpu sse4_2 avx avx2 fma f16c bmi2 avx512f avx512_vnni avx512_bf16 "
                   "amx_tile amx_int8 amx_bf16")
    assert {"-DGGML_NATIVE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_TILE=OFF",
            "-DGGML_AVX512=ON", "-DGGML_AVX512_BF16=ON", "-DGGML_AVX2=ON"} <= xeon
    older = options("fpu sse4_2 avx avx2 fma f16c bmi2")
    assert {"-DGGML_AVX2=ON", "-DGGML_AVX512=OFF", "-DGGML_AVX512_VNNI=OFF"} <= older


@pytest.mark.local_model
@pytest.mark.parametrize("name", list(SHIPPED_MODELS))
async def test_each_shipped_model_loads_in_the_host_and_writes_a_few_tokens(name: str) -> None:
    """On an AMX CPU with a native build this is where the first decode segfaulted."""
    local_model_or_skip(name)
    adapter = LocalAdapter({"model": name, "max_tokens": 8})

    load_seconds = await adapter.load()
    turn = await adapter.complete([{"role": "user", "content": "Say hello."}], [])

    assert load_seconds >= 0 and 0 < turn.output_tokens <= 8
    assert "CPU" in adapter.system_info
    # the safe setting for this build, at this load: never the AMX kernels
    assert not has_amx_kernels(adapter.system_info) or not extra_buffer_types_allowed(
        adapter.system_info)


@pytest.mark.local_model
@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGKILL])
async def test_a_host_that_dies_mid_generation_fails_only_that_call(
        smollm2: Path, sig: signal.Signals) -> None:
    call, pid = await host_writing_a_story()

    os.kill(pid, sig)
    with pytest.raises(HostCrashed) as crashed:
        await asyncio.wait_for(call, timeout=10)

    assert crashed.value.code == ErrorCode.TOOL_FAILURE
    assert f"signal {sig.value}" in crashed.value.message
    assert "the run can be retried" in crashed.value.message
    assert wait_gone(pid, within_s=5), f"host {pid} left as {process_state(pid)}"
    assert await a_fresh_host_answers(pid)


@pytest.mark.local_model
async def test_a_hung_host_is_killed_and_replaced(
        smollm2: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ModelHost, "cancel_grace_s", 0.5)
    call, pid = await host_writing_a_story()

    os.kill(pid, signal.SIGSTOP)  # alive, answering nothing: as a host stuck in native code
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(call, timeout=1)  # the run's timeout cancels the call

    assert wait_gone(pid, within_s=5), "the hung host was not killed"
    assert await a_fresh_host_answers(pid)


@pytest.mark.local_model
async def test_several_calls_share_the_host_without_mixing_their_answers(smollm2: Path) -> None:
    adapter = LocalAdapter({"model": "smollm2-135m", "max_tokens": 12, "seed": 1})
    prompts = [[{"role": "user", "content": f"Count from {n} to {n + 5}."}] for n in (1, 50, 900)]
    alone = [await adapter.complete(prompt, []) for prompt in prompts]

    together = await asyncio.gather(*(adapter.complete(prompt, []) for prompt in prompts))

    assert [turn.text for turn in together] == [turn.text for turn in alone]


async def test_a_file_that_is_not_gguf_fails_its_call_naming_the_file(tmp_path: Path) -> None:
    local_model_or_skip("smollm2-135m")
    fake = tmp_path / "notes.gguf"
    fake.write_bytes(b"these are not model weights\n" * 100)
    adapter = LocalAdapter({"model_path": str(fake)})

    with pytest.raises(ProtocolError) as caught:
        await adapter.complete([{"role": "user", "content": "Hi"}], [])

    assert caught.value.code == ErrorCode.TOOL_FAILURE
    assert str(fake) in caught.value.message and "GGUF" in caught.value.message
    # the host lives on: the next call on a real model is answered by the same process
    pid = model_host().pid
    assert pid is not None
    turn = await LocalAdapter({"model": "smollm2-135m", "max_tokens": 4}).complete(
        [{"role": "user", "content": "Hi"}], [])
    assert turn.output_tokens > 0 and model_host().pid == pid


@pytest.mark.local_model
def test_the_host_goes_down_with_a_killed_parent(smollm2: Path, tmp_path: Path) -> None:
    script = textwrap.dedent("""
        import asyncio, sys, time
        from delegations.protocol.adapters.local import LocalAdapter
        from delegations.protocol.adapters.local_host import model_host
        asyncio.run(LocalAdapter({"model": "smollm2-135m", "max_tokens": 2}).load())
        print(model_host().pid, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert parent.stdout is not None
        host_pid = int(parent.stdout.readline())
        assert process_state(host_pid) not in (None, "Z")
    finally:
        parent.kill()
        parent.wait()

    assert wait_gone(host_pid, within_s=5), "the host outlived its parent"


def test_the_host_keeps_the_two_models_used_last(monkeypatch: pytest.MonkeyPatch) -> None:
    # every (file, n_ctx, n_threads) a run asked for stayed loaded: seven runs took 4.3 GB
    import io

    from delegations.protocol.adapters import model_host as host_module

    loads: list[int] = []

    def fake_load(model: dict[str, object], info: str) -> object:
        loads.append(int(str(model["n_ctx"])))
        return host_module.LoadedModel(llama=object(), load_seconds=0.0, extra_buffer_types=False)

    monkeypatch.setattr(host_module, "load_model", fake_load)
    host = host_module.Host(io.StringIO())
    monkeypatch.setattr(host, "info", lambda: "test")
    first = host._loaded({"path": "m.gguf", "n_ctx": 1024})
    host._loaded({"path": "m.gguf", "n_ctx": 2048})
    assert host._loaded({"path": "m.gguf", "n_ctx": 1024}) is first   # used again: kept, now the latest
    host._loaded({"path": "m.gguf", "n_ctx": 4096})                    # lets 2048 go, not 1024
    assert host._loaded({"path": "m.gguf", "n_ctx": 1024}) is first
    host._loaded({"path": "m.gguf", "n_ctx": 2048})
    assert loads == [1024, 2048, 4096, 2048] and len(host._models) == 2
