"""pivot: C streams of F files become F streams of C files.

File k of every input stream goes to output stream k. Output stream k is
named after file k of the first input stream without its extension, and the
file taken from input stream ``./cycle01`` is named ``cycle01`` plus that
file's extension: ``./cycle01/frame7.tif`` → ``./frame7/cycle01.tif``.
(Input stream ``.`` gives the name ``_``; ``/`` in a stream name becomes
``_``.) Every input stream must hold the same number of files.
"""

from __future__ import annotations

from warehouse import step


def _stem_ext(name: str) -> tuple[str, str]:
    base = name.rsplit("/", 1)[-1]
    stem, dot, ext = base.rpartition(".")
    return (stem, dot + ext) if stem else (base, "")


def main() -> None:
    manifest = step.input_manifest()
    names = list(dict.fromkeys(s.name for s in manifest.streams))
    table = [step.stream_files(name, manifest) for name in names]
    counts = {len(files) for files in table}
    if len(counts) > 1:
        raise SystemExit(f"pivot: the input streams hold different numbers of files: {counts}")
    if step.number() == 0:
        if table and table[0]:
            step.queue(1, *(str(k) for k in range(len(table[0]))))
        return
    k = int(step.step_input())
    out = step.StreamWriter("./" + _stem_ext(table[0][k].path)[0])
    reader = step.reader()
    for name, files in zip(names, table, strict=True):
        label = "_" if name == "." else name[2:].replace("/", "_")
        out.add_file(label + _stem_ext(files[k].path)[1], reader.iter_file(files[k].path))
    step.output(out.finish())


if __name__ == "__main__":
    main()
