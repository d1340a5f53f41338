"""Benchmark tables written into docs between two marker lines (the reports' --docs)."""


def replace_between(path, begin, end, text):
    """Replaces what lies between the lines `begin` and `end` in `path` with `text`.
    Exits naming the markers when `path` lacks them."""
    with open(path) as f:
        content = f.read()
    if begin not in content or end not in content:
        raise SystemExit(f"{path} has no table markers ({begin!r} ... {end!r})")
    head, rest = content.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(path, "w") as f:
        f.write(f"{head}{begin}\n{text}{end}{tail}")
