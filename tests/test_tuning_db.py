"""CPU: the tuning database's store (csrc/store/tuning_db.h): where it lives, entries written
whole and read back only whole, under load from several processes and after a writer is killed,
the size bound, a disk it cannot write, and the ``db`` command. What the tuner keeps in it and
loads on the GPU: tests/test_fastest_tuner_gpu.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

import torch_cudnn_algo
from torch_cudnn_algo import _ops, cli

pytestmark = pytest.mark.skipif(not torch_cudnn_algo.is_available(), reason="needs the C++ extension")

CONFIGURATION = {"direction": "fwd", "input": [8, 64, 1, 56], "weight": [64, 1, 1, 3], "output": [8, 64, 1, 56],
                 "padding": [0, 1], "stride": [1, 1], "dilation": [1, 1], "groups": 64, "dtype": "float16",
                 "channels_last": False, "device": 0, "deterministic": False, "allow_tf32": True,
                 "transposed": False}


def header(**fields: object) -> str:
    return json.dumps({"configuration": CONFIGURATION, "engine": "eng5", **fields})


def save(key: str, blob: bytes = b"", kind: str = "execution_plan", **fields: object) -> bool:
    return _ops.tuning_db_save(kind, key, header(**fields), blob)


def entry_file(tmp: Path) -> Path:
    (path,) = [p for p in tmp.iterdir() if p.suffix in (".plan", ".decision")]
    return path


@pytest.fixture
def db(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB", str(tmp_path / "db"))
    return tmp_path / "db"


# -- where --------------------------------------------------------------------------------------

def test_the_variable_names_the_directory_and_the_older_one_still_counts(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB", str(tmp_path / "db"))
    monkeypatch.setenv("TORCH_CUDNN_ALGO_COMPILE_CACHE", str(tmp_path / "old"))
    assert torch_cudnn_algo.db.directory() == str(tmp_path / "db")
    monkeypatch.delenv("TORCH_CUDNN_ALGO_DB")
    assert torch_cudnn_algo.db.directory() == str(tmp_path / "old")  # the compiled-plan cache's variable, folded in


@pytest.mark.parametrize("off", ["0", ""])
def test_zero_or_empty_turns_it_off(monkeypatch, off):
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB", off)
    assert torch_cudnn_algo.db.directory() is None
    assert not save("k", b"x") and _ops.tuning_db_load("execution_plan", "k") is None


IMPORT_WARNINGS = """
import json, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import torch_cudnn_algo
print("RESULT" + json.dumps({"warnings": [str(w.message) for w in caught], "dir": torch_cudnn_algo.db.directory(),
                             "bound": torch_cudnn_algo.db.max_bytes()}))
"""


def import_with(tmp_path: Path, **settings: str) -> dict:
    """What importing the package in a fresh process warns, and the settings then in force."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_CUDNN_ALGO")}
    env.update(TORCH_DEVICE_BACKEND_AUTOLOAD="0", XDG_CACHE_HOME=str(tmp_path / "xdg"), **settings)
    result = subprocess.run([sys.executable, "-c", IMPORT_WARNINGS], capture_output=True, text=True, env=env,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("RESULT")]
    return json.loads(line[len("RESULT"):])


@pytest.mark.parametrize("bad", ["banana", "-5", "0", "1.5", ""])
def test_a_size_bound_that_is_not_a_whole_number_of_megabytes_warns_once_at_import(tmp_path, bad):
    got = import_with(tmp_path, TORCH_CUDNN_ALGO_DB_MAX_MB=bad)
    mine = [w for w in got["warnings"] if "TORCH_CUDNN_ALGO_DB_MAX_MB" in w]
    assert len(mine) == 1, got["warnings"]
    assert f"TORCH_CUDNN_ALGO_DB_MAX_MB={bad}:" in mine[0]
    assert "whole numbers of megabytes from 1" in mine[0] and "default 1024 MB" in mine[0]
    assert got["bound"] == 1024 * 2**20  # the default, not 1 MiB


def test_a_good_size_bound_is_taken_without_a_word(tmp_path):
    got = import_with(tmp_path, TORCH_CUDNN_ALGO_DB_MAX_MB="2048")
    assert got["bound"] == 2048 * 2**20 and not [w for w in got["warnings"] if "TORCH_CUDNN_ALGO" in w]


def test_a_database_path_naming_a_file_warns_at_import_and_the_default_is_used(tmp_path):
    regular = tmp_path / "not-a-directory"
    regular.write_text("mine")
    got = import_with(tmp_path, TORCH_CUDNN_ALGO_DB=str(regular))
    mine = [w for w in got["warnings"] if "TORCH_CUDNN_ALGO_DB=" in w]
    assert len(mine) == 1, got["warnings"]
    assert str(regular) in mine[0] and "not a directory" in mine[0] and "or to 0" in mine[0]
    default = str(tmp_path / "xdg" / "torch_cudnn_algo" / "db")
    assert default in mine[0] and got["dir"] == default
    assert regular.read_text() == "mine"  # nothing written into the user's file


def test_the_db_command_on_a_database_path_naming_a_file_says_so(monkeypatch, tmp_path, capsys):
    regular = tmp_path / "file"
    regular.write_text("")
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB", str(regular))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with pytest.warns(UserWarning, match="not a directory"):
        assert cli.main(["db", "list"]) == 0
    assert str(tmp_path / "xdg" / "torch_cudnn_algo" / "db") in capsys.readouterr().out


def test_by_default_it_is_under_the_users_cache_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCH_CUDNN_ALGO_DB", raising=False)
    monkeypatch.delenv("TORCH_CUDNN_ALGO_COMPILE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert torch_cudnn_algo.db.directory() == str(tmp_path / "xdg" / "torch_cudnn_algo" / "db")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert torch_cudnn_algo.db.directory() == str(tmp_path / "home" / ".cache" / "torch_cudnn_algo" / "db")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # not a path the XDG spec allows: ignored
    assert torch_cudnn_algo.db.directory() == str(tmp_path / "home" / ".cache" / "torch_cudnn_algo" / "db")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", "")
    assert torch_cudnn_algo.db.directory() is None  # nowhere to keep it: off


def test_the_size_bound_is_a_setting(monkeypatch):
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB_MAX_MB", "3")
    assert torch_cudnn_algo.db.max_bytes() == 3 << 20
    monkeypatch.delenv("TORCH_CUDNN_ALGO_DB_MAX_MB")
    assert torch_cudnn_algo.db.max_bytes() == 1024 << 20


# -- entries ------------------------------------------------------------------------------------

def test_an_entry_reads_back_as_written_and_lists_with_its_configuration(db):
    assert save("key one", b"\x00\x01plan bytes", saved="2026-11-27T10:00:00Z", host="node7")
    assert save("key two", b"", kind="decision", choice="eng9")
    text, blob = _ops.tuning_db_load("execution_plan", "key one")
    assert json.loads(text)["engine"] == "eng5" and blob == b"\x00\x01plan bytes"
    assert _ops.tuning_db_load("decision", "key one") is None  # kinds do not mix
    assert _ops.tuning_db_load("execution_plan", "key three") is None
    entries = {entry.kind: entry for entry in torch_cudnn_algo.db.entries()}
    assert set(entries) == {"decision", "execution_plan"}
    plan = entries["execution_plan"]
    assert str(plan.configuration) == "conv2d 8x64x1x56 -> 64x1x3 s1 p0x1 g64 fp16 contiguous fwd"
    assert (plan.saved, plan.host, plan.header["engine"]) == ("2026-11-27T10:00:00Z", "node7", "eng5")
    assert entries["decision"].header["choice"] == "eng9"


def test_a_later_save_under_the_same_key_replaces_the_entry(db):
    save("k", b"first")
    save("k", b"second, longer")
    assert _ops.tuning_db_load("execution_plan", "k")[1] == b"second, longer"
    assert len(torch_cudnn_algo.db.entries()) == 1


@pytest.mark.parametrize("damage", ["truncated", "blob flipped", "header flipped", "empty", "foreign"])
def test_an_entry_that_is_not_whole_is_never_used(db, damage):
    save("k", b"x" * 1000)
    path = entry_file(db)
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        data = data[:-10]
    elif damage == "blob flipped":
        data[-1] ^= 0xFF
    elif damage == "header flipped":
        data[40] ^= 0x01
    elif damage == "empty":
        data = bytearray()
    else:
        data = bytearray(b"not ours at all, but with our suffix")
    path.write_bytes(bytes(data))
    rejected = torch_cudnn_algo.db.counts()["rejected"]
    assert _ops.tuning_db_load("execution_plan", "k") is None
    assert torch_cudnn_algo.db.counts()["rejected"] == rejected + 1
    assert torch_cudnn_algo.db.entries() == []
    assert save("k", b"y")  # rebuilt: the next save replaces it
    assert _ops.tuning_db_load("execution_plan", "k")[1] == b"y"


def test_another_keys_whole_file_under_this_keys_name_is_not_this_entry(db):
    save("k1", b"one")
    first = entry_file(db)
    save("k2", b"two")
    second = next(p for p in db.iterdir() if p != first)
    second.write_bytes(first.read_bytes())  # k1's entry under k2's name: as a hash collision would look
    assert _ops.tuning_db_load("execution_plan", "k2") is None
    assert [entry.path for entry in torch_cudnn_algo.db.entries()] == [str(first)]


def test_bad_arguments_say_what_is_valid_and_write_nothing(db):
    with pytest.raises(ValueError, match="kinds are 'decision' and 'execution_plan'"):
        _ops.tuning_db_save("plan", "k", header(), b"")
    with pytest.raises(ValueError, match="header must be a JSON object"):
        _ops.tuning_db_save("decision", "k", "[1, 2]", b"")
    with pytest.raises(ValueError, match="needs a key"):
        _ops.tuning_db_save("decision", "", header(), b"")
    assert not db.exists() or list(db.iterdir()) == []


# -- clear, remove --------------------------------------------------------------------------------

def test_clear_removes_entries_and_leftovers_but_nothing_else(db):
    save("a", b"1")
    save("b", b"2", kind="decision")
    (db / "0123456789abcdef.plan.aside.99.0").write_bytes(b"half")
    (db / "README.txt").write_text("a note of the team's")
    assert torch_cudnn_algo.db.clear() == 2
    assert sorted(p.name for p in db.iterdir()) == ["README.txt"]


def test_remove_touches_only_entry_files_of_the_database(db, tmp_path):
    save("a", b"1")
    save("b", b"2")
    outside = tmp_path / "elsewhere.plan"
    outside.write_bytes(b"keep")
    first, second = torch_cudnn_algo.db.entries()
    assert _ops.tuning_db_remove([first.path, str(outside), str(db / "README.txt")]) == 1
    assert outside.exists() and [entry.path for entry in torch_cudnn_algo.db.entries()] == [second.path]


# -- the size bound ---------------------------------------------------------------------------------

def test_least_recently_used_entries_go_first_beyond_the_bound(db, monkeypatch):
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB_MAX_MB", "1")
    blob = b"p" * (200 << 10)  # 200 KiB: every save checks the bound (more than 1/8 of it); 5 fit
    for index in range(4):
        assert save(f"k{index}", blob)
    files = {_key_of(path): path for path in db.iterdir()}
    now = time.time()
    for index in range(4):  # written an hour apart, k0 first
        os.utime(files[f"k{index}"], (now - 3600 * (10 - index),) * 2)
    assert _ops.tuning_db_load("execution_plan", "k0") is not None  # used now: k1 is the least recent
    evicted = torch_cudnn_algo.db.counts()["evicted"]
    for index in range(4, 7):
        assert save(f"k{index}", blob)
    entries = torch_cudnn_algo.db.entries()
    kept = sorted(_key_of(Path(entry.path)) for entry in entries)
    assert sum(entry.bytes for entry in entries) <= 1 << 20
    assert kept == ["k0", "k3", "k4", "k5", "k6"], kept
    assert torch_cudnn_algo.db.counts()["evicted"] == evicted + 2


def _key_of(path: Path) -> str:
    """The key an entry file holds (its second field)."""
    data = path.read_bytes()
    size = int.from_bytes(data[8:16], sys.byteorder)
    return data[16:16 + size].decode()


def test_a_stale_half_written_file_is_removed_and_never_listed(db, monkeypatch):
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB_MAX_MB", "1")
    save("k", b"x")
    stale = db / "0123456789abcdef.plan.aside.4242.0"
    fresh = db / "0123456789abcdee.plan.aside.4243.0"
    stale.write_bytes(b"a killed writer's")
    fresh.write_bytes(b"a write in progress")
    os.utime(stale, (time.time() - 2 * 3600,) * 2)
    assert [_key_of(Path(entry.path)) for entry in torch_cudnn_algo.db.entries()] == ["k"]
    save("big", b"b" * (200 << 10))  # a save that checks the bound
    assert not stale.exists() and fresh.exists()


# -- under load -------------------------------------------------------------------------------------

WRITER = textwrap.dedent("""
    import json, sys, torch_cudnn_algo
    from torch_cudnn_algo import _ops
    name, rounds = sys.argv[1], int(sys.argv[2])
    for i in range(rounds):
        for key in ("shared-1", "shared-2", "own-" + name):
            blob = (name + ":" + str(i) + ":").encode() * (1000 + 37 * i)
            _ops.tuning_db_save("execution_plan", key, json.dumps({"writer": name, "round": i}), blob)
    print("done", flush=True)
""")


def whole(header: str, blob: bytes) -> bool:
    """Whether a loaded entry is one a writer wrote, all of it."""
    fields = json.loads(header)
    unit = f"{fields['writer']}:{fields['round']}:".encode()
    return blob == unit * (1000 + 37 * fields["round"])


def test_many_processes_writing_and_reading_at_once_never_see_half_an_entry(db):
    rejected = torch_cudnn_algo.db.counts()["rejected"]
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, f"w{n}", "60"], env=os.environ.copy(),
                                stdout=subprocess.PIPE, text=True) for n in range(4)]
    seen = 0
    while any(w.poll() is None for w in writers):
        for key in ("shared-1", "shared-2"):
            loaded = _ops.tuning_db_load("execution_plan", key)
            if loaded is not None:
                assert whole(*loaded)
                seen += 1
    assert all(w.wait() == 0 and "done" in w.stdout.read() for w in writers)
    assert seen > 0 and torch_cudnn_algo.db.counts()["rejected"] == rejected
    entries = torch_cudnn_algo.db.entries()
    assert sorted(_key_of(Path(e.path)) for e in entries) == ["own-w0", "own-w1", "own-w2", "own-w3",
                                                              "shared-1", "shared-2"]
    for key in ("shared-1", "shared-2", "own-w2"):
        assert whole(*_ops.tuning_db_load("execution_plan", key))


def test_a_writer_killed_mid_write_leaves_only_whole_entries(db):
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import json, torch_cudnn_algo
        from torch_cudnn_algo import _ops
        print("ready", flush=True)
        i = 0
        while True:
            _ops.tuning_db_save("execution_plan", "big", json.dumps({"writer": "k", "round": i}),
                                (b"k:%d:" % i) * (1000 + 37 * i))
            i += 1
    """)], env=os.environ.copy(), stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "ready"
    time.sleep(1.0)
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    loaded = _ops.tuning_db_load("execution_plan", "big")
    assert loaded is not None and whole(*loaded)
    assert [_key_of(Path(e.path)) for e in torch_cudnn_algo.db.entries()] == ["big"]


# -- a disk it cannot write -------------------------------------------------------------------------

def test_a_disk_it_cannot_write_is_one_warning_never_an_error(tmp_path):
    blocker = tmp_path / "a file, not a directory"
    blocker.write_text("")
    script = textwrap.dedent("""
        import json, warnings, torch_cudnn_algo
        from torch_cudnn_algo import _ops
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = [_ops.tuning_db_save("decision", f"k{i}", json.dumps({}), b"x") for i in range(3)]
        print(json.dumps({"results": results, "warnings": [str(w.message) for w in caught],
                          "counts": _ops.tuning_db_counts()}))
    """)
    env = {**os.environ, "TORCH_CUDNN_ALGO_DB": str(blocker / "db")}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["results"] == [False, False, False]
    assert report["counts"]["save_failed"] == 3
    (message,) = [w for w in report["warnings"] if "tuning database" in w]
    assert str(blocker / "db") in message and "TORCH_CUDNN_ALGO_DB" in message


# -- the db command ---------------------------------------------------------------------------------

def test_db_command_lists_and_clears(db, capsys):
    save("k", b"x" * 2048, saved="2026-11-27T10:00:00Z", host="node7")
    assert cli.main(["db"]) == 0
    out = capsys.readouterr().out
    assert f"tuning database {db}: 1 entries" in out
    assert "execution_plan  eng5" in out and "node7" in out and "conv2d 8x64x1x56 -> 64x1x3" in out
    save("d", kind="decision", pick="eng9_k2=1", pick_ms=0.0123, stock_config_ms=0.0456)
    save("d2", kind="decision", pick=None, pick_ms=0.05, stock_config_ms=0.05)
    assert cli.main(["db", "list", "--kind", "decision"]) == 0
    out = capsys.readouterr().out
    assert "2 entries" in out and "eng9_k2=1" in out and "0.0123  0.0456" in out and "stock's path" in out
    assert cli.main(["db", "list", "--kind", "execution_plan"]) == 0
    assert "1 entries" in capsys.readouterr().out
    assert cli.main(["db", "clear"]) == 0
    assert f"removed 3 entries from {db}" in capsys.readouterr().out
    assert torch_cudnn_algo.db.entries() == []


def test_db_command_when_the_database_is_off(monkeypatch, capsys):
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB", "0")
    assert cli.main(["db"]) == 0
    assert "the tuning database is off" in capsys.readouterr().out


# -- one tuning per node ---------------------------------------------------------------------------

CLAIMER = textwrap.dedent("""
    import json, sys, time, torch_cudnn_algo
    from torch_cudnn_algo import _ops
    print("ready", flush=True)
    sys.stdin.readline()  # every process starts claiming at once
    started = time.monotonic()
    owned, waited = _ops.tuning_db_claim_for("decision", "one key", int(sys.argv[1]), int(sys.argv[2]))
    print(json.dumps({"owned": owned, "waited": waited, "s": time.monotonic() - started}), flush=True)
""")


def claim_at_once(count: int, wait_ms: int, hold_ms: int) -> list[dict]:
    processes = [subprocess.Popen([sys.executable, "-c", CLAIMER, str(wait_ms), str(hold_ms)], env=os.environ.copy(),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(count)]
    for process in processes:
        assert process.stdout.readline().strip() == "ready"
    for process in processes:
        process.stdin.write("go\n")
        process.stdin.flush()
    results = [json.loads(process.stdout.readline()) for process in processes]
    assert all(process.wait() == 0 for process in processes)
    return results


def test_processes_of_a_node_meeting_one_key_at_once_take_turns(db):
    results = claim_at_once(3, wait_ms=10_000, hold_ms=400)
    assert all(result["owned"] for result in results)
    # One went first without waiting; the others waited for it (and for each other).
    assert sorted(result["waited"] for result in results) == [False, True, True], results
    assert max(result["s"] for result in results) >= 0.8  # three holds of 0.4 s, one after the other


def test_a_claim_not_given_within_the_wait_is_not_owned(db):
    results = claim_at_once(2, wait_ms=100, hold_ms=1500)
    assert sorted((result["owned"], result["waited"]) for result in results) == [(False, True), (True, False)], results


def test_a_claim_of_a_killed_process_is_released(db):
    holder = subprocess.Popen([sys.executable, "-c", CLAIMER, "0", "60000"], env=os.environ.copy(),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "ready"
    holder.stdin.write("go\n")
    holder.stdin.flush()
    time.sleep(1.0)  # it holds the claim now
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    owned, waited = _ops.tuning_db_claim_for("decision", "one key", 2000, 0)
    assert owned


# -- moving it: merge another database, export a plan -------------------------------------------------

H100 = "NVIDIA H100 80GB HBM3"


def decision(key: str, pick: str | None, pick_ms: float | None, saved: str, host: str, gpu: str = H100,
             configuration: dict | None = None, blob: bytes = b"") -> None:
    fields = {"pick": pick, "pick_ms": pick_ms, "stock_config_ms": 0.05, "workspace": 1024, "gpu": gpu,
              "cudnn": 91900, "cudnn_frontend": 13200, "torch": "2.11", "saved": saved, "host": host,
              "configuration": configuration or CONFIGURATION}
    assert _ops.tuning_db_save("decision", key, json.dumps(fields), blob)


def test_merging_adds_what_is_missing_and_the_faster_pick_wins_a_conflict(monkeypatch, tmp_path):
    here, there = tmp_path / "here", tmp_path / "there"
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB", str(there))
    decision("only there", "eng1", 0.02, "2026-11-20T00:00:00Z", "b")
    decision("same pick", "eng2", 0.03, "2026-11-20T00:00:00Z", "b")
    decision("faster there", "eng3", 0.01, "2026-11-01T00:00:00Z", "b")
    decision("slower there", "eng4", 0.09, "2026-11-25T00:00:00Z", "b")
    decision("untimed, newer there", "eng5", None, "2026-11-25T00:00:00Z", "b")
    assert save("a plan there", b"theirs")
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB", str(here))
    decision("same pick", "eng2", 0.04, "2026-11-21T00:00:00Z", "a")
    decision("faster there", "eng6", 0.02, "2026-11-21T00:00:00Z", "a")
    decision("slower there", "eng7", 0.03, "2026-11-21T00:00:00Z", "a")
    decision("untimed, newer there", "eng8", 0.01, "2026-11-21T00:00:00Z", "a")
    assert save("a plan there", b"ours")

    report = torch_cudnn_algo.db.merge(there)
    assert (report.added, report.replaced, report.kept) == (1, 2, 3), report
    picks = {key: json.loads(_ops.tuning_db_load("decision", key)[0])["pick"]
             for key in ("only there", "same pick", "faster there", "slower there", "untimed, newer there")}
    assert picks == {"only there": "eng1", "same pick": "eng2", "faster there": "eng3", "slower there": "eng7",
                     "untimed, newer there": "eng5"}
    assert _ops.tuning_db_load("execution_plan", "a plan there")[1] == b"ours"  # the same plan: ours stays
    conflicts = {(c["here"]["pick"], c["merged"]["pick"]): (c["kept"], c["by"]) for c in report.conflicts}
    assert conflicts == {("eng6", "eng3"): ("merged", "faster"), ("eng7", "eng4"): ("here", "faster"),
                         ("eng8", "eng5"): ("merged", "newer")}


def test_merging_refuses_itself_a_missing_directory_and_a_database_that_is_off(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB", str(tmp_path / "here"))
    save("k", b"x")
    with pytest.raises(ValueError, match="is this process's tuning database itself"):
        torch_cudnn_algo.db.merge(tmp_path / "here")
    with pytest.raises(ValueError, match="is not a directory"):
        torch_cudnn_algo.db.merge(tmp_path / "nowhere")
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB", "0")
    with pytest.raises(ValueError, match="the tuning database is off"):
        torch_cudnn_algo.db.merge(tmp_path)


def test_exporting_makes_a_plan_of_one_gpus_decisions_with_their_execution_plans(db, tmp_path):
    other = {**CONFIGURATION, "groups": 1, "weight": [64, 64, 1, 3]}
    decision("a", "eng9_k2=1", 0.01, "2026-11-20T00:00:00Z", "a", blob=b"serialized plan")
    decision("a, other rules", "eng10", 0.02, "2026-11-21T00:00:00Z", "a")  # same configuration, newer
    decision("b", None, 0.05, "2026-11-20T00:00:00Z", "a", configuration=other)
    decision("c", "eng11", 0.01, "2026-11-20T00:00:00Z", "a", gpu="NVIDIA H200")
    with pytest.raises(ValueError, match="several GPU models"):
        torch_cudnn_algo.db.export_plan()
    plan = torch_cudnn_algo.db.export_plan(H100)
    assert plan.gpu == H100 and plan.cudnn == 91900 and plan.policy == "fastest" and len(plan) == 2
    first = plan["conv2d 8x64x1x56 -> 64x1x3 s1 p0x1 g64 fp16 contiguous fwd"]
    assert first.choice == "eng10" and first.time_ms == 0.02 and first.stock_ms == 0.05 and first.workspace == 1024
    stock = plan["conv2d 8x64x1x56 -> 64x1x3 s1 p0x1 fp16 contiguous fwd"]
    assert stock.choice is None
    # Saved and read back as any plan file; the execution plan travels with its pick.
    torch_cudnn_algo.Plan.from_json(plan.to_json())
    (h200,) = torch_cudnn_algo.db.export_plan("NVIDIA H200").entries.values()
    assert h200.choice == "eng11"
    _ops.tuning_db_remove([e.path for e in torch_cudnn_algo.db.entries() if e.key in ("a, other rules", "c")])
    (only,) = [e for e in torch_cudnn_algo.db.export_plan().entries.values() if e.choice is not None]
    assert only.choice == "eng9_k2=1" and only.execution_plan.data == b"serialized plan"
    assert only.execution_plan.cudnn_frontend == 13200


def test_db_command_imports_and_exports(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB", str(tmp_path / "there"))
    decision("a", "eng1", 0.02, "2026-11-20T00:00:00Z", "node2")
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB", str(tmp_path / "here"))
    decision("a", "eng2", 0.03, "2026-11-21T00:00:00Z", "node1")
    assert cli.main(["db", "import", str(tmp_path / "there")]) == 0
    out = capsys.readouterr().out
    assert "0 added, 1 replaced, 0 kept, 1 conflicts" in out
    assert "here eng2 (0.03 ms, node1), merged eng1 (0.02 ms, node2): kept merged (faster)" in out
    assert cli.main(["db", "export", str(tmp_path / "plan.json")]) == 0
    assert "wrote" in capsys.readouterr().out
    # The decisions were made "with cuDNN 9.19"; a process running another cuDNN says so on loading.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch_cudnn_algo.PlanMismatchWarning)
        plan = torch_cudnn_algo.load_plan(tmp_path / "plan.json")
    assert [entry.choice for entry in plan.entries.values()] == ["eng1"]
    assert cli.main(["db", "import"]) == 2
    assert "give the directory" in capsys.readouterr().err
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB", str(tmp_path / "empty"))
    assert cli.main(["db", "export", str(tmp_path / "empty-plan.json")]) == 2
    assert "holds no decisions, so there is nothing to export" in capsys.readouterr().err
    assert not (tmp_path / "empty-plan.json").exists()
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB", str(tmp_path / "here"))
    assert cli.main(["db", "export", str(tmp_path / "a100.json"), "--gpu", "NVIDIA A100"]) == 2
    assert "no readable decisions for the GPU model 'NVIDIA A100'" in capsys.readouterr().err
    assert not (tmp_path / "a100.json").exists()
    assert cli.main(["db", "import", str(tmp_path / "nowhere")]) == 2
