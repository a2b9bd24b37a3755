"""A dwsep problem key as one suite row (`{ name = ..., N = 2, input = [9, 9], act_dw = "relu", ... }`)."""
from factory.selector import problem_from_key

LISTS = ("input", "filter", "stride", "pad", "dilation")


def suite_row(key: str, name: str) -> str:
    fields = []
    for part in key.split(":")[4].split(","):
        field, value = part.split("=")
        if field in LISTS:
            value = "[" + ", ".join(value.split("x")) + "]"
        elif not value.isdigit():
            value = f'"{value}"'
        fields.append(f"{field} = {value}")
    return "  { name = \"" + name + "\", " + ", ".join(fields) + ', layouts = ["NHWGC"] },'


def short_name(prefix: str, index: int, key: str) -> str:
    p = problem_from_key(key)
    return f"{prefix}{index:02d}_{len(p.input)}d_c{p.C}_k{p.K}_f{p.filter[-1]}"
