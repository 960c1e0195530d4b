"""copy: read every block of the input (verifying it) and write it again.

Step 0 queues one level-1 step per input stream (its index). Each reads the
stream's blocks through the block store, which checks every block against
its MD5, stores them again, and reports the stream unchanged; for a
normalized input the output PDH equals the input PDH.
"""

from __future__ import annotations

from warehouse import step


def main() -> None:
    streams = step.input_manifest().streams
    if step.number() == 0:
        if streams:
            step.queue(1, *(str(i) for i in range(len(streams))))
        return
    stream = streams[int(step.step_input())]
    store = step.warehouse().store
    for locator in stream.locators:
        if not locator.is_empty:
            store.put(store.get(locator))
    store.flush()
    step.output(stream.format())


if __name__ == "__main__":
    main()
