"""Print a GGUF file's header as JSON: file size, tensor data offset, the scalar metadata, and
every tensor's name, GGML type, shape and bytes (the roofline's inputs, kept when the file is too
large to keep). Run: python benchmarks/real_gpu/gguf_header.py model.gguf > header.json"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    from gguf import GGUFReader
    from gguf.constants import GGUFValueType

    path = sys.argv[1]
    r = GGUFReader(path)
    meta = {}
    for f in r.fields.values():
        if f.types and f.types[0] != GGUFValueType.ARRAY:
            v = f.contents()
            meta[f.name] = v
        elif f.types:
            meta[f.name] = f"<array of {len(f.data)}>"
    tensors = [{"name": t.name, "type": t.tensor_type.name, "shape": [int(x) for x in t.shape], "n_bytes": int(t.n_bytes)}
               for t in r.tensors]
    json.dump({"file": os.path.basename(path), "size": os.path.getsize(path), "data_offset": r.data_offset,
               "metadata": meta, "tensors": tensors}, sys.stdout, indent=1, default=str)


if __name__ == "__main__":
    main()
