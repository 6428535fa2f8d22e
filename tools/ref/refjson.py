# Shared JSON writer for the reference generators: top-level fields pretty,
# one list element per line, so the checked-in files diff line by line.
import json


def dump(obj, path, list_key="cases"):
    head = {k: v for k, v in obj.items() if k != list_key}
    items = obj.get(list_key, [])
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n")
        for k, v in head.items():
            f.write(f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},\n")
        f.write(f" {json.dumps(list_key)}: [\n")
        for i, it in enumerate(items):
            sep = "," if i + 1 < len(items) else ""
            f.write("  " + json.dumps(it, ensure_ascii=False, separators=(",", ":")) + sep + "\n")
        f.write(" ]\n}\n")
