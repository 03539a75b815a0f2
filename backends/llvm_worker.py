"""A compile worker: a process that turns LLVM IR into MCJIT object code while the backend compiles other
kernels of the same program (llvmlite serializes every LLVM call of one process, so kernels compile side by side
only in separate processes).

Run as a script (`python llvm_worker.py`), it imports llvm_pipeline from its own folder and nothing else of the
package. It reads requests from stdin and answers on stdout, one at a time, each a pickle behind an 8-byte
little-endian length: request (ir, cpu name, cpu features) -> reply (object code, optimized IR, None) or
(None, None, error text). It ends at end of input (the backend closes it at exit, or its process ended).
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
from typing import IO, cast


def read_message(stream: IO[bytes]) -> object | None:
    """One length-prefixed pickle from the stream; None at its end."""
    head = stream.read(8)
    if len(head) < 8:
        return None
    (n,) = struct.unpack("<Q", head)
    body = stream.read(n)
    return None if len(body) < n else pickle.loads(body)


def write_message(stream: IO[bytes], message: object) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def main() -> None:
    from llvm_pipeline import object_code  # type: ignore[import-not-found]  # the worker's folder is its sys.path[0]

    replies = os.fdopen(os.dup(1), "wb")  # the replies' own copy of stdout: anything printed goes to stderr
    os.dup2(2, 1)
    while (request := read_message(sys.stdin.buffer)) is not None:
        ir, cpu_name, cpu_features = cast(tuple[str, str, str], request)
        try:
            obj, optimized = object_code(ir, cpu_name, cpu_features)
            write_message(replies, (obj, optimized, None))
        except Exception as e:  # the backend compiles this one itself, and reports its error there
            write_message(replies, (None, None, f"{type(e).__name__}: {e}"))


if __name__ == "__main__":
    main()
