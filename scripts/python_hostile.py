#!/usr/bin/env python3
"""Hostile inputs from Python: dtype and shape that do not match
the file, and the other ways `warpstore.open` and indexing can be handed
something wrong. Each must raise the Python exception a user expects, with a
message that says what is wrong, and lose nothing: afterwards a good open of
the same file reads every row right.

Writes one line per case to OUT ("refused", "NOT" or "skipped", a tab, the
case, a tab, the message): warpstore-reliability-cpu --python-cases OUT
counts them into hostile.inputs. Exits 0 even when a case is not refused
(the study reports it); 2 when the package cannot be imported.
Usage: python_hostile.py OUT
"""
import os
import sys
import tempfile

try:
    import numpy as np
    import warpstore
except ImportError as e:  # the study then counts the Python cases as not tried
    print(f"python_hostile: cannot import warpstore: {e}", file=sys.stderr)
    sys.exit(2)

ROWS, COLS = 4096, 64
SMALL = dict(cache="256KiB", threads=1, controller="host")


def main(out_path):
    rows = []
    data = np.random.default_rng(6).standard_normal((ROWS, COLS)).astype(np.float32)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "features.f32")
        data.tofile(path)
        size = os.path.getsize(path)

        def expect(name, exc, words, fn):
            try:
                fn()
                rows.append(("NOT", name, "accepted"))
            except exc as e:
                msg = str(e)
                ok = all(w in msg for w in words)
                rows.append(("refused" if ok else "NOT", name,
                             msg if ok else f"message lacks {words}: {msg}"))
            except Exception as e:  # noqa: BLE001 (the wrong type is the finding)
                rows.append(("NOT", name, f"wrong exception {type(e).__name__}: {e}"))

        def opened(*args, **kw):
            with warpstore.open(path, *args, **{**SMALL, **kw}):
                pass

        expect("dtype that is not a dtype", TypeError, ["not a dtype"],
               lambda: opened("not-a-dtype"))
        expect("dtype not supported (object)", TypeError, ["unsupported dtype", "object"],
               lambda: opened(object))
        expect("shape needing more bytes than the file", ValueError,
               [path, f"needs {(ROWS + 1) * COLS * 4}", str(size)],
               lambda: opened("float32", (ROWS + 1, COLS)))
        expect("dtype wider than the file was written with", ValueError,
               [path, "needs", str(size)], lambda: opened("float64", (ROWS, COLS)))
        expect("negative shape", ValueError, ["shape", "-5"], lambda: opened("float32", (100, -5)))
        expect("zero in the shape", ValueError, ["shape"], lambda: opened("float32", (0, COLS)))
        expect("row larger than the file", ValueError, [path, "not one row"],
               lambda: opened("float32", (-1, size)))
        expect("writable mode from Python", ValueError, ["read-only"],
               lambda: opened("float32", mode="w"))

        with warpstore.open(path, "float32", (-1, COLS), **SMALL) as a:
            expect("float indices", TypeError, ["integers"], lambda: a[np.array([1.0, 2.0])])
            expect("row index past the shape", IndexError, [str(ROWS), "out of range"],
                   lambda: a[np.array([0, ROWS])])
            expect("negative row index past the shape", IndexError, [str(-ROWS - 1)],
                   lambda: a[np.array([-ROWS - 1])])
            # Nothing lost: the same open still reads every row right.
            idx = np.arange(ROWS)
            good = np.array_equal(a[idx], data[idx])
        with warpstore.open(path, "float32", (ROWS, COLS), **SMALL) as a:
            good = good and np.array_equal(a[np.arange(ROWS)], data)
        if not good:
            rows = [(("NOT" if v == "refused" else v), n, m + "; the file no longer reads right")
                    for v, n, m in rows]
    with open(out_path, "w") as f:
        for v, n, m in rows:
            f.write(f"{v}\t{n}\t{m.replace(chr(9), ' ').replace(chr(10), ' ')}\n")
    for v, n, m in rows:
        print(f"python hostile {n:45s} {v}  {m}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(64)
    main(sys.argv[1])
