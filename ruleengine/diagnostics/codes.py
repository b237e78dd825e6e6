"""The registry of diagnostic codes: one stable code per kind of finding.

Each code has a kebab-case name, a default severity, a one-line summary, an explanation
and a minimal example that triggers it (shown by ``autofusion rule-codes CODE`` and used by
the tests, so a code without an example cannot be added). Codes are never renumbered or
reused; retired codes stay here marked as such.

Families: AF0xx reading files (YAML), AF1xx schema, AF2xx rule semantics (``verify``),
AF3xx rule-set and lint findings (``check``), AF4xx the kernel catalog, AF5xx reading the
ONNX model, AF6xx rule tests (``test``), AF9xx hardware targets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ruleengine.diagnostics.model import Diagnostic, Location, Severity


@dataclass(frozen=True)
class CodeInfo:
    """Documentation of one diagnostic code."""

    code: str
    name: str
    severity: Severity
    summary: str
    explanation: str
    example: str  # a rule file (YAML text) that triggers the code; "" when not expressible
    example_note: str = ""  # how to trigger it when the example is not a plain file
    command: str = "verify"  # the first command that reports it (verify, check, match, ...)


_E = Severity.ERROR
_W = Severity.WARNING

_CODES: tuple[CodeInfo, ...] = (
    # ---------------------------------------------------------------- AF0xx reading files
    CodeInfo(
        "AF001",
        "path-not-found",
        _E,
        "A path given on the command line does not exist or holds no rule files.",
        "The command cannot run: a file, directory or glob named on the command line "
        "matched nothing. Exit code 2.",
        "",
        "autofusion verify does/not/exist.yaml",
    ),
    CodeInfo(
        "AF002",
        "unreadable-file",
        _E,
        "The file is not UTF-8 text (binary, NUL bytes) or could not be read.",
        "Rule files are UTF-8 YAML text. A binary file (for example an ONNX model passed "
        "by mistake) is refused before parsing.",
        "",
        "a file containing NUL bytes, e.g. printf 'name: a\\0' > bad.yaml",
    ),
    CodeInfo(
        "AF003",
        "file-too-large",
        _E,
        "The file is larger than the 1 MiB limit for a rule file.",
        "Rule files are small; a huge file is almost certainly a mistake (or an attack) "
        "and is refused before parsing.",
        "",
        "a YAML file larger than 1 MiB",
    ),
    CodeInfo(
        "AF004",
        "yaml-syntax",
        _E,
        "The file is not valid YAML.",
        "The YAML parser stopped at the given line and column; nothing in the file is loaded.",
        "name: bad\nmatch: [unclosed\n",
    ),
    CodeInfo(
        "AF005",
        "duplicate-key",
        _E,
        "A mapping has the same key twice.",
        "YAML parsers usually keep the last value silently; autofusion refuses the file "
        "instead. A frequent cause is several rules pasted into one document: separate "
        "rules need a `---` line between them.",
        "name: a\npriority: 1\nname: b\nmatch:\n  ops:\n    - type: Relu\n"
        "rewrite:\n  target_op: A\n",
    ),
    CodeInfo(
        "AF006",
        "yaml-too-complex",
        _E,
        "The document expands to too many nodes or nests too deeply (alias bomb).",
        "YAML anchors and aliases can make a small file expand exponentially ('billion "
        "laughs'). Expansion is budgeted; files over the budget are refused.",
        'a: &a ["x","x","x","x","x","x","x","x","x","x"]\n'
        "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
        "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
        "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
        "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
        "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n",
    ),
    CodeInfo(
        "AF007",
        "not-a-mapping",
        _E,
        "A YAML document is not a mapping (a rule must be `key: value` pairs).",
        "Each YAML document in a rule file is one rule, written as a mapping. A list or "
        "a bare scalar at the top of a document is refused.",
        "- name: a\n- name: b\n",
    ),
    CodeInfo(
        "AF008",
        "unsupported-tag",
        _E,
        "A YAML tag that safe loading does not allow (e.g. !!python/object).",
        "Only the standard YAML tags for strings, numbers, booleans, null, sequences and "
        "mappings are accepted. Language-specific tags could run code and are refused.",
        "name: !!python/object:os.system a\nmatch:\n  ops:\n    - type: Relu\n"
        "rewrite:\n  target_op: A\n",
    ),
    CodeInfo(
        "AF009",
        "empty-file",
        _E,
        "The file holds no rule (empty or only comments).",
        "An empty rule file is a mistake (a rule not yet written, or content lost) that "
        "would otherwise pass `verify` and fuse nothing; it fails (exit 1).",
        "# nothing here\n",
    ),
    CodeInfo(
        "AF010",
        "yaml11-boolean",
        _W,
        "`yes`/`no`/`on`/`off` used where a boolean is expected.",
        "YAML 1.1 reads yes/no/on/off as booleans, YAML 1.2 as strings. autofusion reads "
        "them as booleans where a boolean is expected (and in op params) but asks for "
        "`true`/`false`, which every YAML reader agrees on.",
        "name: a\nenabled: yes\nmatch:\n  ops:\n    - type: Relu\nrewrite:\n  target_op: A\n",
    ),
    CodeInfo(
        "AF011",
        "quoted-number",
        _W,
        "A number written as a quoted string where a number is expected.",
        "The value is read as the number it spells, but quoting numbers hides typos; write "
        "the number without quotes.",
        'name: a\npriority: "10"\nmatch:\n  ops:\n    - type: Relu\nrewrite:\n  target_op: A\n',
    ),
    # ---------------------------------------------------------------- AF1xx schema
    CodeInfo(
        "AF101",
        "missing-field",
        _E,
        "A required field is missing.",
        "Every rule needs `name`, `match` (with `ops` or `branches`) and "
        "`rewrite.target_op`; some nested objects have required fields too (an op's "
        "`type`, a constraint's own fields).",
        "rewrite:\n  attributes:\n    tile_policy: chunked\n",
    ),
    CodeInfo(
        "AF102",
        "unknown-field",
        _E,
        "A field the rule format does not have (often a typo).",
        "Unknown fields are refused rather than ignored, so a misspelt field cannot "
        "silently change nothing. The hint suggests the closest known field.",
        "name: a\npriorty: 1\nmatch:\n  ops:\n    - type: Relu\nrewrite:\n  target_op: A\n",
    ),
    CodeInfo(
        "AF103",
        "wrong-type",
        _E,
        "A field has the wrong type (e.g. a string where an integer is expected).",
        "See `schemas/rule.schema.json` (or `autofusion rule-schema`) for each field's type.",
        "name: a\npriority: high\nmatch:\n  ops:\n    - type: Relu\nrewrite:\n  target_op: A\n",
    ),
    CodeInfo(
        "AF104",
        "invalid-value",
        _E,
        "A field has a value outside what it allows (enum, range, pattern, length).",
        "The message says which values are allowed.",
        "name: a\nmatch:\n  ops:\n    - type: Relu\n      input_sources:\n        input0:\n"
        "          source_type: weights\nrewrite:\n  target_op: A\n",
    ),
    CodeInfo(
        "AF105",
        "unknown-constraint-type",
        _E,
        "A constraint `type` that autofusion does not know.",
        "Known constraint types: dtype_match, shape_constraint, memory_limit, "
        "workspace_size, channel_divisibility, single_consumer, ub_fit. A constraint "
        "nobody evaluates would give a false sense of safety, so it is an error.",
        "name: a\nmatch:\n  ops:\n    - type: Relu\nrewrite:\n  target_op: A\n"
        "constraints:\n  - type: alignment_check\n",
    ),
    # ---------------------------------------------------------------- AF2xx semantics
    CodeInfo(
        "AF201",
        "unknown-op-type",
        _E,
        "An op `type` that is no ONNX op, alias, composite or op class.",
        "An op type is an ONNX operator known to onnx.defs (e.g. Conv, Relu), a framework "
        "alias from ops/aliases.yaml (Conv2d, BatchNorm, Swish, ...), a composite (silu, "
        "layernorm, ...) or an op class (@elementwise, @view, ...). Names are "
        "case-sensitive.",
        "name: a\nmatch:\n  ops:\n    - type: Conv2D\nrewrite:\n  target_op: A\n",
    ),
    CodeInfo(
        "AF202",
        "bad-from-op",
        _E,
        "`from_op` does not refer to an earlier op of the same pattern.",
        "`input_sources.inputK.from_op: j` says input K is fed by op j, which must come "
        "before this op (0 <= j < this op's index).",
        "name: a\nmatch:\n  ops:\n    - type: Conv\n    - type: Relu\n      input_sources:\n"
        "        input0:\n          from_op: 1\nrewrite:\n  target_op: A\n",
    ),
    CodeInfo(
        "AF203",
        "bad-rewrite-input",
        _E,
        "A `rewrite.inputs` entry refers to an op or output that does not exist.",
        "`rewrite.inputs[].from_op` must index an op of every match alternative, and "
        "`input_port` values must be distinct.",
        "name: a\nmatch:\n  ops:\n    - type: Conv\n    - type: Relu\nrewrite:\n"
        "  target_op: A\n  inputs:\n    - from_op: 5\n",
    ),
    CodeInfo(
        "AF204",
        "bad-range",
        _E,
        "A min/max pair is inverted or impossible.",
        "`inputs.min_inputs` <= `inputs.max_inputs`, `subgraph.input_count_range` is "
        "[low, high] with low <= high, `repeat.min` <= `repeat.max`.",
        "name: a\nmatch:\n  ops:\n    - type: Add\n      inputs:\n        min_inputs: 3\n"
        "        max_inputs: 2\nrewrite:\n  target_op: A\n",
    ),
    CodeInfo(
        "AF205",
        "duplicate-output-name",
        _E,
        "The same `output_names` entry is used twice in one pattern.",
        "Output names identify tensors for rewrite and reports; they must be unique within "
        "a match alternative.",
        "name: a\nmatch:\n  ops:\n    - type: Conv\n      output_names: [x]\n"
        "    - type: Relu\n      output_names: [x]\nrewrite:\n  target_op: A\n",
    ),
    CodeInfo(
        "AF206",
        "unknown-dtype",
        _E,
        "A dtype name that is not an ONNX tensor type.",
        "Use ONNX names in lower case: float16, float32, float64, bfloat16, int8, int16, "
        "int32, int64, uint8, uint16, uint32, uint64, bool, ...",
        "name: a\nmatch:\n  ops:\n    - type: Relu\nrewrite:\n  target_op: A\n"
        "constraints:\n  - type: dtype_match\n    allowed_dtypes: [fp16]\n",
    ),
    CodeInfo(
        "AF207",
        "bad-input-port",
        _E,
        "An `input_sources` port that the op cannot have, or a source that is ambiguous.",
        "Ports are named input0, input1, ...; a port number must be below the op's "
        "`max_inputs` (and below the ONNX op's input count). Each source names exactly "
        "one of `from_op` or `source_type`.",
        "name: a\nmatch:\n  ops:\n    - type: Relu\n      input_sources:\n"
        "        input3:\n          source_type: const\nrewrite:\n  target_op: A\n",
    ),
    CodeInfo(
        "AF208",
        "unsafe-path",
        _E,
        "An output path that is absolute or escapes the output directory.",
        "Paths in `output` (file_path, dot_graph_path) are relative to the output "
        "directory and may never leave it (no absolute paths, no `..`).",
        "name: a\nmatch:\n  ops:\n    - type: Relu\nrewrite:\n  target_op: A\n"
        "output:\n  file_path: ../../etc/\n",
    ),
    CodeInfo(
        "AF209",
        "empty-match",
        _E,
        "`match` has neither `ops` nor `branches`.",
        "A rule must say which ops it matches: `match.ops` and/or `match.branches`.",
        "name: a\nmatch:\n  subgraph:\n    output_count: 1\nrewrite:\n  target_op: A\n",
    ),
    CodeInfo(
        "AF210",
        "bad-one-of",
        _E,
        "A param value given as a mapping that is not `{one_of: [values]}`.",
        "A param value is a plain value, or `{one_of: [v1, v2, ...]}` (at least one value) "
        "to accept any of several values, e.g. `perm: {one_of: [[0, 2, 1, 3], [0, 2, 3, 1]]}`.",
        "name: a\nmatch:\n  ops:\n    - type: Transpose\n      params:\n"
        "        perm: {any_of: [[0, 2, 1, 3]]}\nrewrite:\n  target_op: A\n",
    ),
    CodeInfo(
        "AF211",
        "bad-same-as",
        _E,
        "`same_as` names this op itself, an op the pattern does not have, or an input the "
        "op cannot have.",
        "`inputK: {same_as: {op: j, input: m}}` says input K reads the same tensor as input "
        "m of op j; j is another op of the same pattern (before or after this one) and m an "
        "input that op can have.",
        "name: a\nmatch:\n  ops:\n    - type: Mul\n    - type: Add\n      input_sources:\n"
        "        input1:\n          same_as: {op: 5, input: 0}\nrewrite:\n  target_op: A\n",
    ),
    CodeInfo(
        "AF212",
        "bad-optional-op",
        _E,
        "An op with `repeat.min: 0` (optional) that is op 0, fans out, or does not consume "
        "the op before it.",
        "`repeat: {min: 0}` makes an op optional: when it is absent, the next op (and any "
        "`from_op` naming it) reads what it would have read, i.e. the op before it. That is "
        "only defined for an op that chains to the op before it: not op 0, not a `fan_out` "
        "op, not an op whose `input_sources` give a `from_op` or start a new root.",
        "name: a\nmatch:\n  ops:\n    - type: MatMul\n      repeat: {min: 0, max: 1}\n"
        "    - type: Relu\nrewrite:\n  target_op: A\n",
    ),
    CodeInfo(
        "AF213",
        "value-not-const",
        _E,
        "`value`, `value_in`, `tolerance` or `shape` on an input that is not `source_type: const`.",
        "A constant's values are checked only where the rule says the input is a constant: "
        "`inputK: {source_type: const, value: 3.0}`. An input fed by another pattern op "
        "(`from_op`), the same tensor as another input (`same_as`), or a source kind that "
        "may be an activation (`const_or_param`, `graph_input`, `any`) has no value the "
        "compiler knows, so the check would never hold.",
        "name: a\nmatch:\n  ops:\n    - type: Conv\n    - type: Add\n      input_sources:\n"
        "        input1: {source_type: const_or_param, value: 3.0}\nrewrite:\n  target_op: A\n",
    ),
    CodeInfo(
        "AF214",
        "value-type-mismatch",
        _E,
        "A `value`/`value_in` the input can never hold (a fraction on an integer input, a "
        "number on a string or bool input).",
        "The op's ONNX schema says which element types an input takes; a value with a "
        "fraction (`1.5`) on an input that takes only integers (Reshape's shape, Slice's "
        "starts, ...) or any number on a string or bool input never holds.",
        "name: a\nmatch:\n  ops:\n    - type: Relu\n    - type: Reshape\n"
        "      input_sources:\n        input1: {source_type: const, value: [1.5, 2]}\n"
        "rewrite:\n  target_op: A\n",
    ),
    CodeInfo(
        "AF215",
        "bad-value-spec",
        _E,
        "A value check that contradicts itself: `tolerance` without `value`/`value_in`, both "
        "`value` and `value_in`, or a `value` list whose length is not what `shape` holds.",
        "`value: v` (every element equals v) or `value: [v1, v2, ...]` (the elements in "
        "order) or `value_in: [v1, v2]` (every element one of these), never both; "
        "`tolerance: {rel: r, abs: a}` only with one of them; a `value` list has as many "
        "numbers as `shape` has elements (`shape: scalar` means one).",
        "name: a\nmatch:\n  ops:\n    - type: Relu\n    - type: Add\n      input_sources:\n"
        "        input1: {source_type: const, tolerance: {rel: 0.001}}\n"
        "rewrite:\n  target_op: A\n",
    ),
    CodeInfo(
        "AF216",
        "value-on-big-tensor",
        _E,
        "A value check on a constant larger than 64 elements.",
        "Values are read only from small constants (scalars and tensors of at most 64 "
        "elements, kept by the model loader); weight bytes are never read. A `shape` of more "
        "than 64 elements together with `value`/`value_in` can never be checked. Check the "
        "shape alone, or drop the value.",
        "name: a\nmatch:\n  ops:\n    - type: Relu\n    - type: Mul\n      input_sources:\n"
        "        input1: {source_type: const, shape: [16, 16], value: 1.0}\n"
        "rewrite:\n  target_op: A\n",
    ),
    CodeInfo(
        "AF217",
        "misspelt-param",
        _E,
        "A param the op type does not have, spelt like one it has.",
        "A param the op does not have holds on no node, so the op would never match; when "
        "its name is close to a param the op has (`grop` for Conv's `group`), it is a typo. "
        "It is an error in `verify` and `check`, and match, explain and fuse refuse the "
        "rule file, so a rule that can never match is never counted as matched. The hint "
        "names the param meant (did you mean ...?) and lists the params the op has. A "
        "param with no close name is AF303, a warning.",
        "name: a\nmatch:\n  ops:\n    - type: Conv\n      params:\n        grop: 1\n"
        "rewrite:\n  target_op: A\n",
    ),
    CodeInfo(
        "AF220",
        "reserved-output-path",
        _E,
        "An output path names a file that fuse itself writes (plan.json, graph.dot, ...).",
        "`fuse` writes the fused model (`*.fused.onnx`, `*.fused.onnx.data`), `plan.json`, "
        "`report.txt`, `report.json`, `graph.dot` and `graph.svg` at the top of the output "
        "directory. A rule's `output.file_path` or `dot_graph_path` may not use one of "
        "those names as a folder, and a rule DOT graph may not be one of them.",
        "name: a\nmatch:\n  ops:\n    - type: Relu\nrewrite:\n  target_op: A\n"
        "output:\n  file_path: plan.json\n",
    ),
    CodeInfo(
        "AF221",
        "impossible-path",
        _E,
        "A path no file system can take (a NUL byte, a name over 255 bytes, a path over "
        "4,095 bytes).",
        "Linux refuses these at open(); a rule's output paths are refused when the rule is "
        "read instead of when `fuse` has already done its work, and paths on the command "
        "line (model, --inputs, -o, --target) before anything is read. At fuse time the "
        "output limits are checked again with the real output directory in front.",
        "name: a\nmatch:\n  ops:\n    - type: Relu\nrewrite:\n  target_op: A\n"
        'output:\n  file_path: "kernels\\0x"\n',
    ),
    # ---------------------------------------------------------------- AF3xx rule set / lint
    CodeInfo(
        "AF301",
        "duplicate-rule-name",
        _E,
        "Two rules in one rule set have the same name.",
        "Rule names identify rules in plans, reports and --enable/--disable; they must be "
        "unique across the whole rule set.",
        "name: a\nmatch:\n  ops:\n    - type: Relu\nrewrite:\n  target_op: A\n---\n"
        "name: a\nmatch:\n  ops:\n    - type: Sigmoid\nrewrite:\n  target_op: B\n",
        command="check",
    ),
    CodeInfo(
        "AF302",
        "priority-conflict",
        _E,
        "Two rules match the same op sequence with the same priority.",
        "When two rules can match the same nodes, the higher priority wins at fuse time; "
        "with equal priorities the choice is arbitrary (broken by name). Give one rule a "
        "higher priority, or make the patterns differ.",
        "name: a\npriority: 1\nmatch:\n  ops:\n    - type: MatMul\n    - type: Relu\n"
        "rewrite:\n  target_op: A\n---\nname: b\npriority: 1\nmatch:\n  ops:\n"
        "    - type: MatMul\n    - type: Relu\nrewrite:\n  target_op: B\n",
        command="check",
    ),
    CodeInfo(
        "AF303",
        "unknown-param",
        _W,
        "A param that the op type does not have, and no param of it is spelt like it.",
        "Params are ONNX attribute names of the op (or of the ONNX ops an alias stands "
        "for) or the alias's own params from ops/aliases.yaml. A param the op does not have "
        "holds on no node, so the op never matches: it is never ignored, which would widen "
        "the rule. match, explain and fuse print this finding on stderr, record a "
        "param_mismatch near miss naming the param, and never count the rule as matched; "
        "`check --strict` fails on it. A param spelt like one the op has is AF217, an "
        "error. The hint lists the params the op does have.",
        "name: a\nmatch:\n  ops:\n    - type: Relu\n      params:\n        clip_max: 0.0\n"
        "rewrite:\n  target_op: A\n",
        command="check",
    ),
    CodeInfo(
        "AF304",
        "no-hbm-saving",
        _W,
        "The pattern fuses only metadata ops (Reshape, Squeeze, ...) into one real op.",
        "@view ops (Reshape, Squeeze, Unsqueeze, Flatten, Identity) move no data, so "
        "fusing them into a single compute op saves no HBM traffic; at fuse time such "
        "candidates come out as 'no benefit'.",
        "name: a\nmatch:\n  ops:\n    - type: MatMul\n    - type: Reshape\n"
        "rewrite:\n  target_op: A\n",
        command="check",
    ),
    CodeInfo(
        "AF305",
        "never-matches",
        _W,
        "Contradictory params: the pattern can never match a real node.",
        "For example a param that is fixed for every ONNX node given another value "
        "(MatMul transpose_b: true), a value outside the param's known values, a value of "
        "the wrong kind for its ONNX attribute (kernel_size: 3 where kernel_shape is a "
        "list), min/max_inputs the op cannot have, or two params that map onto the same "
        "ONNX attribute with different values.",
        "name: a\nmatch:\n  ops:\n    - type: MatMul\n      params:\n        transpose_b: true\n"
        "rewrite:\n  target_op: A\n",
        command="check",
    ),
    CodeInfo(
        "AF306",
        "disconnected-pattern",
        _W,
        "Some ops of a pattern are not connected to the others.",
        "Ops are connected by chaining (op i consumes op i-1 when it has no `input_sources`, "
        "or only source kinds and no later op takes op i-1 by `from_op`) and by `from_op` "
        "links. A part of the pattern with no link to op 0 would be matched against every "
        "unrelated node (a cross product): slow, and never a fusible group.",
        "name: a\nmatch:\n  ops:\n    - type: MatMul\n    - type: Relu\n      input_sources:\n"
        "        input0:\n          source_type: const_or_param\n    - type: Sigmoid\n"
        "      input_sources:\n        input0:\n          from_op: 0\nrewrite:\n  target_op: A\n",
        command="check",
    ),
    CodeInfo(
        "AF307",
        "internal-port",
        _W,
        "A `rewrite.inputs` entry names an op input that is fed inside the pattern.",
        "`{from_op: j, input_idx: k}` names the tensor op j reads on input k, meant as the "
        "external tensor behind a kernel port. When that input is linked to another op of "
        "the pattern (`from_op`, `same_as` of a linked input, or the chain from the previous "
        "op), the tensor is internal to the group and never reaches the fused kernel: "
        "name the input of the op that starts the chain instead.",
        "name: a\nmatch:\n  ops:\n    - type: MatMul\n    - type: Relu\nrewrite:\n"
        "  target_op: A\n  inputs:\n    - {from_op: 1, input_idx: 0}\n",
        command="check",
    ),
    CodeInfo(
        "AF308",
        "removed-param",
        _W,
        "A param that ONNX removed from the op in a later opset (Squeeze's and ReduceMean's "
        "axes, Split's split, ...).",
        "The param is an attribute of the op only up to some opset; later versions dropped "
        "it (most became inputs). On a model of a newer opset no node has it, so the op "
        "never matches there: its nodes are near misses, never candidates. To match newer "
        "models, check the input that took its place, e.g. Squeeze's axes from opset 13 as "
        "`input_sources: {input1: {source_type: const, value: 0}}`. (Params an alias maps "
        "to an input, such as Clip's min/max, are checked on either and never reported.)",
        "name: a\nmatch:\n  ops:\n    - type: MatMul\n    - type: Squeeze\n      params: "
        "{axes: [0]}\nrewrite:\n  target_op: A\n",
        command="check",
    ),
    CodeInfo(
        "AF330",
        "combinatorial-pattern",
        _E,
        "A rule expands to more matcher clauses than the budget (1,024).",
        "The matcher turns each rule into one Datalog clause per combination of "
        "alternative, repeat length and composite form; the count is their product "
        "(8 ops each `repeat: {min: 1, max: 16}` make 16^8). `fuse` refuses such a rule "
        "(AF546); `check` says so before any model is read.",
        "name: a\nmatch:\n  ops:\n    - type: Relu\n      repeat: {min: 1, max: 16}\n"
        "    - type: Sigmoid\n      repeat: {min: 1, max: 16}\n    - type: Tanh\n"
        "      repeat: {min: 1, max: 16}\nrewrite:\n  target_op: A\n",
        command="check",
    ),
    CodeInfo(
        "AF331",
        "ambiguous-repeat",
        _W,
        "Two chained repeated ops can bind the same node types.",
        "A run of n such nodes is matched once per way to split it between the two ops, so "
        "the answers (and the matching time and memory) grow with the square of the run, "
        "and with its cube for three such ops. Give one op a fixed count or types that do "
        "not overlap.",
        'name: a\nmatch:\n  ops:\n    - type: "@elementwise"\n      repeat: {min: 1, max: 4}\n'
        '    - type: "@elementwise"\n      repeat: {min: 1, max: 4}\nrewrite:\n'
        "  target_op: A\n",
        command="check",
    ),
    # ------------------------------------------------------------ AF4xx kernel catalog
    CodeInfo(
        "AF401",
        "kernel-catalog-invalid",
        _E,
        "A kernel catalog file is malformed: YAML, schema, or reference semantics that are "
        "not an ONNX function.",
        "Catalog entries (kernels/*.yaml, --kernels DIR) follow schemas/kernel.schema.json; "
        "each form's function is parsed with onnx.parser. The message names the file, line "
        "and field. Exit code 2.",
        "",
        "autofusion check rules/ --kernels my_kernels/ (a form whose body misses a '}')",
        command="fuse",
    ),
    CodeInfo(
        "AF402",
        "no-contract",
        Severity.INFO,
        "A rule's target_op has no kernel catalog entry: no contract, the plan cannot be verified.",
        "Without an entry, nothing says what the kernel computes, so verification can only "
        "compare the matched subgraph with itself. Add an entry (docs/kernels.md) or pass "
        "--kernels DIR. A note, so a team's own rule passes --strict; "
        "--require-contracts makes it an error.",
        "name: a\nmatch:\n  ops:\n    - type: Relu\nrewrite:\n  target_op: NoSuchKernel\n",
        command="check",
    ),
    CodeInfo(
        "AF403",
        "unknown-kernel-attribute",
        _E,
        "rewrite.attributes sets an attribute the kernel does not have.",
        "The kernel generator would receive an attribute its kernel does not take. The "
        "message lists the kernel's attributes and the closest name.",
        "name: a\nmatch:\n  ops:\n    - type: MatMul\n    - type: Add\n    - type: Relu\n"
        "rewrite:\n  target_op: MatMulBiasRelu\n  attributes:\n    activaton: relu\n",
        command="check",
    ),
    CodeInfo(
        "AF404",
        "kernel-attribute-value",
        _E,
        "rewrite.attributes gives a kernel attribute a value of the wrong type or one the "
        "kernel does not take.",
        "For example activation: gelu on ConvBNRelu, whose reference semantics apply Relu: "
        "a rule computing something else must name another kernel.",
        "name: a\nmatch:\n  ops:\n    - type: Conv\n    - type: Relu\nrewrite:\n"
        "  target_op: ConvBNRelu\n  attributes:\n    activation: gelu\n",
        command="check",
    ),
    CodeInfo(
        "AF405",
        "kernel-port-binding",
        _E,
        "rewrite.inputs binds a port the kernel does not have, binds one port twice, or "
        "binds a port to a tensor produced inside the group.",
        "An entry {from_op, input_idx, input_port} feeds kernel input port input_port with "
        "the tensor op from_op reads on input input_idx; an entry with output_idx names a "
        "matched op's output, a tensor inside the group, which never feeds a kernel input "
        "port. Without rewrite.inputs the catalog entry binds the ports itself.",
        "name: a\nmatch:\n  ops:\n    - type: MatMul\n    - type: Add\nrewrite:\n"
        "  target_op: MatMulAdd\n  inputs:\n    - {from_op: 0, output_idx: 0, input_port: 1}\n",
        command="check",
    ),
    CodeInfo(
        "AF406",
        "contract-unbound",
        _E,
        "A fused group does not fit its kernel's contract (no form fits its ops, or a port "
        "binds nothing).",
        "Defence in depth: the decision already turns such candidates away (verdict "
        "contract_mismatch, code contract-mismatch, with the reason in explain and the "
        "plan), so it fires only for a group the cost stage could not check. "
        "The group is written with its original subgraph as the body and counts as a "
        "verification failure: --verify fails, --safe drops it. Without verification it "
        "is a warning (one per rule, kernel and reason, naming how many groups and the "
        "first ids: a layer repeated 4,096 times is one line) and plan.json records the "
        "reason of each group.",
        "",
        "a rule matching MatMul+GELU that names MatMulBiasRelu, fused with --verify",
        command="fuse",
    ),
    # ------------------------------------------------------- AF5xx reading the ONNX model
    CodeInfo(
        "AF501",
        "unreadable-model",
        _E,
        "The model file could not be read as ONNX.",
        "The file is missing, is not a serialized ONNX ModelProto, or is truncated. "
        "Exit code 2; nothing is written.",
        "",
        "autofusion match notes.txt --preset all (any file that is not ONNX)",
        command="match",
    ),
    CodeInfo(
        "AF502",
        "cyclic-graph",
        _E,
        "The ONNX graph has a cycle.",
        "ONNX graphs are acyclic; a cycle means the file was edited by hand or is corrupt. "
        "The message names nodes on the cycle. Exit code 2.",
        "",
        "a model where node A reads B's output and B reads A's",
        command="match",
    ),
    CodeInfo(
        "AF503",
        "tensor-with-two-producers",
        _E,
        "A tensor is produced by two nodes (or by a node and an initializer/input).",
        "ONNX graphs are in SSA form: every tensor has one producer. Exit code 2.",
        "",
        "two nodes both writing output 'y'",
        command="match",
    ),
    CodeInfo(
        "AF504",
        "dangling-input",
        _E,
        "A node reads a tensor that nothing produces.",
        "No node, initializer or graph input defines the tensor: the model is truncated. "
        "Exit code 2.",
        "",
        "a node whose input names a tensor that does not exist",
        command="match",
    ),
    CodeInfo(
        "AF505",
        "duplicate-node-name",
        _W,
        "Two nodes share a name; none of them is fused.",
        "Node names identify groups in the plan and the fused model, so a node whose name "
        "is not unique is never fused (reports call the later ones name__2, ... to tell "
        "them apart; plan.json never lists such a made-up name). The input model itself "
        "is not changed.",
        "",
        "two nodes both called 'n'",
        command="match",
    ),
    CodeInfo(
        "AF506",
        "shape-inference-failed",
        _W,
        "ONNX shape inference failed; the shapes the model declares are used.",
        "Candidates whose tensors have no shape cannot be costed and come out as "
        "dynamic_shape. Export the model with shapes, or bind symbolic dims with --dim.",
        "",
        "a model with an op whose shape function rejects its inputs",
        command="match",
    ),
    CodeInfo(
        "AF507",
        "unknown-dim-name",
        _W,
        "A --dim name=value binds no symbolic dimension of the model.",
        "Usually a typo; the message lists the model's symbolic dims. An unknown input axis "
        "without a name (-1, no value, ?) is bound by its axis name: --dim x[0]=1.",
        "",
        "autofusion match model.onnx --preset all --dim no_such_dim=4",
        command="match",
    ),
    CodeInfo(
        "AF508",
        "empty-model",
        _E,
        "The file parses as ONNX but holds no graph.",
        "Nothing to analyse. Exit code 2.",
        "",
        "an empty ModelProto",
        command="match",
    ),
    CodeInfo(
        "AF510",
        "unknown-input-name",
        _E,
        "--input-shape names no graph input of the model.",
        "Graph inputs are the model's inputs that are not initializers; the hint lists "
        "them. Exit code 2.",
        "",
        "autofusion match model.onnx --input-shape no_such_input:1,128",
        command="match",
    ),
    CodeInfo(
        "AF511",
        "input-shape-rank",
        _E,
        "--input-shape gives another number of sizes than the input's rank.",
        "NAME:d0,d1,... gives one size per axis of the graph input. Exit code 2.",
        "",
        "autofusion match model.onnx --input-shape input_ids:128   (input_ids has rank 2)",
        command="match",
    ),
    CodeInfo(
        "AF512",
        "input-shape-not-positive",
        _E,
        "An --input-shape size is zero or negative.",
        "Every size is a positive integer. Exit code 2.",
        "",
        "autofusion match model.onnx --input-shape input_ids:1,0",
        command="match",
    ),
    CodeInfo(
        "AF513",
        "input-shape-overflow",
        _E,
        "An --input-shape size does not fit an ONNX dim (int64).",
        "ONNX dims are signed 64-bit integers. Exit code 2.",
        "",
        "autofusion match model.onnx --input-shape input_ids:1,99999999999999999999",
        command="match",
    ),
    CodeInfo(
        "AF514",
        "input-shape-conflict",
        _E,
        "--input-shape changes a dim the model declares static.",
        "Only symbolic or unknown dims can be bound (unknown: no value, a negative value such "
        "as PaddlePaddle's -1, or the name ?); a static size is part of the exported "
        "model (its weights and reshapes were built for it). Re-export for other sizes. "
        "Exit code 2.",
        "",
        "autofusion match model.onnx --input-shape input_ids:1,64   (the model says 1x16)",
        command="match",
    ),
    CodeInfo(
        "AF540",
        "input-not-found",
        _E,
        "The model (or --inputs file) named on the command line does not exist or cannot "
        "be opened.",
        "Check the path (relative paths are taken from the current directory) and its "
        "permissions. Exit code 2.",
        "",
        "autofusion fuse no/such/model.onnx",
        command="fuse",
    ),
    CodeInfo(
        "AF541",
        "input-not-a-file",
        _E,
        "The model (or --inputs file) exists but is not a regular file (a directory, FIFO "
        "or device).",
        "A model is read whole from a regular file; a directory, a named pipe or a device "
        "such as /dev/zero is refused before anything is read (a FIFO would block, a "
        "device never ends). Exit code 2.",
        "",
        "autofusion fuse /dev/zero",
        command="fuse",
    ),
    CodeInfo(
        "AF542",
        "external-data-unreadable",
        _E,
        "A weight file the model refers to (external data) is too short or outside the "
        "model's folder.",
        "fuse never reads a weight, but a file that cannot hold the tensors naming it, or "
        "one outside the model's folder (an absolute path, '..'), means a broken or "
        "hostile model; onnx and onnxruntime refuse it too. A missing file is only a "
        "warning (AF520). Exit code 2.",
        "",
        "a model whose initializer names ../weights.bin",
        command="fuse",
    ),
    CodeInfo(
        "AF543",
        "output-write-failed",
        _E,
        "The output set could not be written (disk full, permission denied, a file or "
        "directory in the way).",
        "Nothing partial is left: the set is staged beside the output directory and "
        "swapped in only when complete. Exit code 2.",
        "",
        "autofusion fuse model.onnx -o /proc/out",
        command="fuse",
    ),
    CodeInfo(
        "AF544",
        "overwrite-input",
        _E,
        "An output would overwrite the input model.",
        "The input model is never modified; choose another output directory. Exit code 2.",
        "",
        "autofusion fuse out/m.fused.onnx -o out",
        command="fuse",
    ),
    CodeInfo(
        "AF545",
        "output-locked",
        _E,
        "Another autofusion run is writing the same output directory.",
        "A lock file beside the output directory (`.NAME.autofusion.lock`) is held while "
        "a run writes its set; a second writer is refused instead of mixing the two "
        "sets. The lock dies with its process, so a killed run never blocks later runs. "
        "Exit code 2.",
        "",
        "two autofusion fuse ... -o out at the same time",
        command="fuse",
    ),
    CodeInfo(
        "AF546",
        "match-budget-exceeded",
        _E,
        "A rule's pattern grows too large to match (repeat, branches and op classes multiply).",
        "The matcher compiles each rule to clauses and stops at a fixed budget instead of "
        "running out of memory; the message names the rule and its file:line:col. Lower "
        "`repeat.max`, use fewer op classes in a row, or split the rule. `check` reports "
        "the same rules before a model is read. Exit code 2.",
        "",
        "a rule of 8 ops, each repeat: {min: 1, max: 16}, on any model",
        command="fuse",
    ),
    CodeInfo(
        "AF547",
        "bad-dim-flag",
        _E,
        "A --dim flag is not name=positive integer, or names one dim twice with two sizes.",
        "Dims bind the model's symbolic dimensions (batch=1, seq=512); a size is ASCII "
        "digits, at least 1 and at most 2^63-1 (ONNX dims are int64). Exit code 2.",
        "",
        "autofusion fuse model.onnx --dim batch=-1",
        command="fuse",
    ),
    CodeInfo(
        "AF548",
        "number-out-of-range",
        _E,
        "A number given on the command line or to the Python API is outside its range.",
        "--seed is an integer from 0 to 2^63-1, --time-limit a positive number of seconds, "
        "--benefit-threshold a fraction from 0 to 1, a dim size a positive int64; NaN and "
        "infinities are refused. Numbers in rule and target files are checked by their "
        "schemas (AF1xx, AF902). Exit code 2.",
        "",
        "autofusion fuse model.onnx --verify --seed -1",
        command="fuse",
    ),
    # ------------------------------------------------------------------ AF6xx rule tests
    CodeInfo(
        "AF601",
        "rule-test-directive",
        _E,
        "A rule test's directive line is malformed or misspelt.",
        "Rule tests (`<rule>.tests/*.onnxtxt`) state their expectations in comment lines: "
        "`# match: n1,n2`, `# no-match`, `# todo-match: n1,n2`, `# todo-no-match`, "
        "`# near-miss: code`, `# rule: name`. A near-spelling such as `# expect:`, a flag "
        "with a value, an empty list or a `# rule:` naming no rule of the file is an error, "
        "so a typo never turns an expectation into a silent comment.",
        "",
        "a test file with the line `# expect: conv,relu` (autofusion test rules/)",
        command="test",
    ),
    CodeInfo(
        "AF602",
        "rule-test-no-expectation",
        _E,
        "A rule test states no expectation.",
        "A test graph with no `# match:`, `# no-match`, `# todo-match:` or `# todo-no-match` "
        "line tests nothing. `autofusion test --update` writes what matches now.",
        "",
        "a <rule>.tests/*.onnxtxt file with no directive line",
        command="test",
    ),
    CodeInfo(
        "AF603",
        "rule-test-syntax",
        _E,
        "A rule test is not a model in the ONNX text format (or not a valid model).",
        "The ONNX text parser stopped at the given line and column, or the parsed model is "
        "malformed (a dangling input, a cycle). The test cannot run.",
        "",
        "a test file whose node line lacks its closing parenthesis",
        command="test",
    ),
    CodeInfo(
        "AF604",
        "rule-test-orphan",
        _E,
        "A `<rule>.tests` folder has no rule file `<rule>.yaml` beside it.",
        "Usually a renamed or deleted rule whose tests stayed behind; they would never run.",
        "",
        "a folder old_name.tests/ with no old_name.yaml beside it",
        command="test",
    ),
    CodeInfo(
        "AF605",
        "rule-test-old-spelling",
        _W,
        "A `# near-miss:` line spells a code with underscores (`intermediate_escapes`).",
        "Codes have one spelling, kebab-case, everywhere: `match --near-misses`, explain's "
        "near-miss lines, plan.json's `code`, docs/codes.md and rule tests. The snake_case "
        "form is a verdict's (plan.json `verdict`); rule tests still read it as the code, "
        "with this warning. Write `# near-miss: intermediate-escapes`.",
        "",
        "a test file with the line '# near-miss: intermediate_escapes'",
        command="test",
    ),
    # -------------------------------------------- AF52x weights and verification memory
    CodeInfo(
        "AF520",
        "weights-missing",
        _W,
        "An external weights file the model references is not there (structure-only export).",
        "Deciding and rewriting never read a weight, so `fuse` still writes the plan, the "
        "report and the fused graph, whose tensors reference the same file relative to "
        "OUTDIR; exit 0. Verification needs the weights (AF521).",
        "",
        "autofusion fuse model.onnx (with model.onnx.data moved away)",
        command="fuse",
    ),
    CodeInfo(
        "AF521",
        "verify-needs-weights",
        _E,
        "--verify or --safe was asked for, but the model's weights file is missing.",
        "Verification runs the model in onnxruntime, which needs every weight. Put the "
        "weights file where the model references it, or fuse without --verify/--safe. "
        "Exit code 2; nothing is written.",
        "",
        "autofusion fuse model.onnx --verify (with model.onnx.data moved away)",
        command="fuse",
    ),
    CodeInfo(
        "AF522",
        "not-enough-memory",
        _E,
        "A whole-model verification run would need more memory than is available.",
        "The estimate (weights plus every activation of known size) is compared with the "
        "memory available before onnxruntime starts, so the run is refused instead of "
        "crashing. Use --verify-mode per-group (or auto), which verifies group by group in "
        "memory bounded by the largest group. Exit code 2.",
        "",
        "autofusion fuse llama-8b.onnx --verify --verify-mode whole (on a 16 GiB machine)",
        command="fuse",
    ),
    CodeInfo(
        "AF523",
        "out-of-memory",
        _E,
        "The run ran out of memory (MemoryError, or onnxruntime failed to allocate).",
        "Nothing is written. Verification in --verify-mode per-group needs memory for one "
        "group at a time; smaller --dim values shrink every activation. Exit code 2.",
        "",
        "autofusion fuse model.onnx --verify --dim seq=10000000",
        command="fuse",
    ),
    CodeInfo(
        "AF524",
        "weights-outside-outdir",
        _W,
        "The fused model's weights stay outside OUTDIR (--weights share).",
        "Its external tensors reference the original file by a relative path that leaves "
        "OUTDIR, which onnx.checker and onnxruntime refuse. Drop --weights share (the "
        "default copies them, as a reflink where the filesystem has one), or write into "
        "the model's own folder (-o), which shares them at no cost.",
        "",
        "autofusion fuse models/model.onnx --weights share -o out/",
        command="fuse",
    ),
    CodeInfo(
        "AF525",
        "safe-mode-dropped",
        _W,
        "fuse --safe dropped groups that failed verification and solved again without them.",
        "Each round verifies the plan, drops the groups that fail (isolation check, "
        "bisection, per-group check or contract) and asks the solver again without those "
        "candidates, so overlapping candidates of other rules take their place; up to 8 "
        "rounds. The fused model passes verification; exit 0. The warning names the rules "
        "and kernels dropped and the HBM saving of the final plan; report.txt, report.json "
        "and plan.json list every round (`verification.rounds`).",
        "",
        "autofusion fuse model.onnx --safe --rules my_rules/ --kernels my_kernels/ (a wrong "
        "kernel in my_kernels/)",
        command="fuse",
    ),
    # ------------------------------------------------------------- AF9xx hardware targets
    CodeInfo(
        "AF901",
        "target-not-found",
        _E,
        "--target names no bundled target and no existing YAML file.",
        "Bundled targets are listed by `autofusion targets`; a path must end in .yaml/.yml. "
        "Exit code 2.",
        "",
        "autofusion explain model.onnx --target ascend999",
        command="explain",
    ),
    CodeInfo(
        "AF902",
        "target-invalid",
        _E,
        "A target file is malformed or does not satisfy schemas/target.schema.json.",
        "Each offending field is named. Exit code 2.",
        "",
        "a target YAML without ub_bytes",
        command="explain",
    ),
)

CODES: Mapping[str, CodeInfo] = {c.code: c for c in _CODES}
BY_NAME: Mapping[str, CodeInfo] = {c.name: c for c in _CODES}


def lookup(code_or_name: str) -> CodeInfo | None:
    """Find a code by its code (AF201, case-insensitive) or its kebab-case name."""
    key = code_or_name.strip()
    return CODES.get(key.upper()) or BY_NAME.get(key.lower())


def make(
    name: str,
    message: str,
    location: Location | None = None,
    *,
    hint: str | None = None,
    related: tuple[Location, ...] = (),
    severity: Severity | None = None,
) -> Diagnostic:
    """Build a Diagnostic for the registered code called ``name`` (kebab-case)."""
    info = BY_NAME[name]
    return Diagnostic(
        code=info.code,
        name=info.name,
        severity=severity or info.severity,
        message=message,
        location=location,
        hint=hint,
        related=related,
    )


def render_markdown() -> str:
    """docs/codes.md, generated from this registry (a test keeps the file in sync)."""
    out = [
        "# Diagnostic codes",
        "",
        "<!-- Generated from ruleengine/diagnostics/codes.py by "
        "`python -m ruleengine.diagnostics.codes > docs/codes.md`; do not edit. -->",
        "",
        "Every finding of autofusion (rule lint, model loading, targets) has a stable code, a "
        "kebab-case name, a message saying where and what, and a hint saying how to fix it. "
        "`autofusion rule-codes` lists them; `autofusion rule-codes CODE` (or NAME) prints "
        "one entry. Codes are never renumbered or reused.",
        "",
        "Families: AF0xx reading files, AF1xx schema, AF2xx rule semantics (`verify`), "
        "AF3xx rule-set and lint findings (`check`), AF5xx reading the ONNX model, AF6xx "
        "rule tests (`test`), AF9xx hardware targets. Rule errors fail (exit 1); warnings "
        "fail only with `--strict`. "
        "AF001, AF5xx and AF9xx errors mean the command could not run (exit 2).",
        "",
        "| code | name | severity | command | summary |",
        "| --- | --- | --- | --- | --- |",
    ]
    for c in _CODES:
        out.append(
            f"| [{c.code}](#{c.code.lower()}-{c.name}) | `{c.name}` | {c.severity} | "
            f"`{c.command}` | {c.summary} |"
        )
    for c in _CODES:
        out += ["", f"## {c.code} {c.name}", "", f"**{c.severity}**, reported by "
                f"`autofusion {c.command}`. {c.summary}", "", c.explanation, ""]  # fmt: skip
        if c.example:
            out += ["Example that triggers it:", "", "```yaml", c.example.rstrip("\n"), "```"]
        else:
            out += [f"Example: {c.example_note}"]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render_markdown(), end="")
