"""`wh put --exclude/--skip-unreadable/--dry-run/-q/--no-progress` (docs/cli.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner

from warehouse.cli import cli


def wh(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("WH_")}
    env["WH_HOME"] = str(tmp_path / "home")
    done = CliRunner().invoke(cli, list(args), env=env)
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    return done.exit_code, done.stdout, done.stderr


def tree(root: Path) -> Path:
    (root / "cache").mkdir(parents=True)
    (root / "d" / "cache").mkdir(parents=True)
    (root / "a.txt").write_text("a\n")
    (root / "b.tmp").write_text("t\n")
    (root / "d" / "c.tmp").write_text("t\n")
    (root / "cache" / "x").write_text("x\n")
    (root / "d" / "cache" / "y").write_text("y\n")
    (root / "d" / "keep").write_text("k\n")
    (root / "top").write_text("top\n")
    (root / "d" / "top").write_text("deep top\n")
    return root


def listing(tmp_path: Path, pdh: str) -> list[str]:
    code, out, err = wh(tmp_path, "ls", "--json", pdh)
    assert code == 0, err
    return sorted(f["path"] for f in json.loads(out) if f.get("type", "file") == "file")


def test_exclude_follows_gitignore_rules(tmp_path: Path) -> None:
    src = tree(tmp_path / "src")
    args = ["--exclude", "*.tmp", "--exclude", "cache/", "--exclude", "/top"]
    code, out, err = wh(tmp_path, "put", "--json", *args, str(src))
    assert code == 0, err
    put = json.loads(out)
    assert put["excluded"] == 5 and put["files"] == 3
    assert listing(tmp_path, put["pdh"]) == ["a.txt", "d/keep", "d/top"]


def test_dry_run_lists_and_stores_nothing(tmp_path: Path) -> None:
    src = tree(tmp_path / "src")
    code, out, err = wh(tmp_path, "put", "--dry-run", "--exclude", "d/", str(src))
    assert code == 0, err
    assert out.splitlines() == ["path\tsize", "a.txt\t2", "b.tmp\t2", "top\t4", "cache/x\t2"]
    assert "would store 4 files, 10 bytes" in err and "nothing stored" in err
    assert not (tmp_path / "home").exists()  # the warehouse was not even opened
    code, out, _ = wh(tmp_path, "put", "--dry-run", "--json", str(src))
    dry = json.loads(out)
    code, out, _ = wh(tmp_path, "put", "--json", str(src))
    real = json.loads(out)
    # The same keys whatever the path; a dry run has no PDH.
    assert set(dry) - {"would_store"} == set(real) and dry["pdh"] is None
    assert dry["files"] == real["files"] == 8 and dry["bytes"] == real["bytes"]
    assert code == 0
    code, _, err = wh(tmp_path, "put", "--dry-run", "--name", "x", str(src))
    assert code == 2 and "--dry-run names nothing" in err


def test_unreadable_entries_abort_unless_skipped(tmp_path: Path) -> None:
    src = tree(tmp_path / "src")
    (src / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(src / "fifo")
    code, out, err = wh(tmp_path, "put", str(src))
    assert code == 2 and out == "" and "dangling symbolic link" in err
    code, out, err = wh(tmp_path, "put", "--skip-unreadable", "--json", str(src))
    assert code == 0, err
    put = json.loads(out)
    assert sorted(Path(s["path"]).name for s in put["skipped"]) == ["dangling", "fifo"]
    assert "Skipped: dangling symbolic link" in err
    assert "dangling" not in listing(tmp_path, put["pdh"])
    code, out, err = wh(tmp_path, "put", "-q", "--skip-unreadable", str(src))
    assert code == 0 and err == "" and out.strip() == put["pdh"]


def test_a_bad_exclude_is_refused(tmp_path: Path) -> None:
    src = tree(tmp_path / "src")
    for bad in ("", "   "):
        code, _, err = wh(tmp_path, "put", "--exclude", bad, str(src))
        assert code == 2 and err.startswith("Error: --exclude: "), err


def test_manifest_put_json_has_the_same_keys(tmp_path: Path) -> None:
    src = tree(tmp_path / "src")
    code, out, _ = wh(tmp_path, "put", "--json", "--no-progress", str(src))
    first = json.loads(out)
    code, text, _ = wh(tmp_path, "manifest", first["pdh"])
    (tmp_path / "m.txt").write_text(text)
    code, out, err = wh(tmp_path, "put", "--json", "--manifest", str(tmp_path / "m.txt"))
    assert code == 0, err
    again = json.loads(out)
    assert set(again) == set(first) and again["pdh"] == first["pdh"]


def _dry_run_as_it_was(src: Path, excludes: list[str], skip: bool, as_json: bool) -> str:
    """What --dry-run printed from the whole tree scanned first (the reference)."""
    from warehouse.cli.put import _keys
    from warehouse.collection.scan import Filter, scan_paths

    keep = Filter(exclude=tuple(excludes), skip_unreadable=skip)
    tree_ = scan_paths([src], keep)
    files = [(f"{d.rel}/{n}" if d.rel else n, size) for d in tree_.walk() for n, _, size in d.files]
    if as_json:
        value = _keys(
            files=len(files),
            bytes=tree_.total_size,
            skipped=[{"path": p, "reason": r} for p, r in keep.skipped],
            excluded=keep.excluded,
        ) | {"would_store": [{"path": p, "size": s} for p, s in files]}
        return json.dumps(value, indent=2, sort_keys=True) + "\n"
    lines = ["path\tsize"]
    for path, size in files:
        shown = path.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
        lines.append(f"{shown}\t{size}")
    return "".join(line + "\n" for line in lines)


def test_dry_run_prints_as_it_walks_what_a_whole_scan_printed(tmp_path: Path) -> None:
    src = tree(tmp_path / "src")
    (src / "d" / "a sub").mkdir()
    (src / "d" / "a sub" / "Übergrößé\tand\nnewline").write_text("odd\n")
    (src / "d" / "zz after the subdirectories").write_text("z\n")
    (src / "back\\slash").write_text("b\n")
    (src / "d" / "dangling").symlink_to(tmp_path / "nowhere")
    (src / "empty dir").mkdir()
    for excludes in ([], ["*.tmp", "cache/"]):
        args = [f"--exclude={e}" for e in excludes] + ["--skip-unreadable"]
        for as_json in (False, True):
            code, out, err = wh(
                tmp_path, "put", "--dry-run", *args, *(["--json"] if as_json else []), str(src)
            )
            assert code == 0, err
            assert out == _dry_run_as_it_was(src, excludes, True, as_json), (excludes, as_json)
            if not as_json:
                assert err.count("Skipped: ") == 1 and "dangling" in err
                assert err.endswith("1 skipped); nothing stored\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    for as_json in (False, True):
        code, out, _ = wh(
            tmp_path, "put", "--dry-run", *(["--json"] if as_json else []), str(empty)
        )
        assert code == 0 and out == _dry_run_as_it_was(empty, [], False, as_json)
    assert not (tmp_path / "home").exists()
