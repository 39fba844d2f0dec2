"""Glue is glue: what a declared build dependency or verification shim may hold (issue 50 class 8).

A file a kernel's ``build:`` lists under ``build_dependencies`` or ``verification_shims`` is compiled
with the kernel, or binds it for verification, but is not the kernel: it may hold bindings and
declarations only (``PYBIND11_MODULE``, ``TORCH_LIBRARY``, includes, forward declarations) and thin
wrappers that forward to the kernel's entry points. ``computations`` reads such a C, C++ or CUDA file
as the compiler does (``compliance.preprocessor``: comments and literals set apart) and names every
function body (a lambda's inside it included) that does more than forward.

The test is conservative: a body is a forwarding wrapper only if it has none of

* a loop or jump (``for``, ``while``, ``do``, ``goto``) or a call of the function itself (recursion);
* a subscript (``x[i]``: element access to tensor data), an increment or compound assignment
  (``++``, ``+=``, ``<<=``, ...);
* a SIMD or compiler intrinsic (``_mm256_*``, ``__m256``, ``__builtin_*``, NEON ``v*q_*``), inline
  ``asm``, an OpenMP or other ``#pragma``;
* a call of an ATen/torch operator (``at::``/``torch::`` functions other than allocation and
  construction, options, device and stream helpers) or of a tensor method other than inspection,
  binding, views, conversion, copies and initialisation (``data_ptr``, ``size``, ``numel``,
  ``contiguous``, ``reshape``, ``to``, ``zero_``, ``def``, ``impl``, ...): a shim that binds a
  kernel's name to ``at::embedding_bag`` computes with torch;
* a call of a ``std::`` algorithm (``accumulate``, ``transform``, ``sort``, ...) or a thread.

Anything else (declarations, calls of the kernel's host launchers, ``TORCH_CHECK``, allocation of
outputs, a kernel launch ``<<<...>>>``, scalar arithmetic on sizes) is forwarding. Python glue is read
from its AST the same way (loops, comprehensions, subscripts of tensors, ``torch.*`` operators other
than allocation).
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass

from compliance import preprocessor


@dataclass(frozen=True)
class Computation:
    """A function body in glue that computes."""

    line: int
    """Line where the body opens."""
    function: str
    """The function's name (``<lambda>``, ``<body>`` where none is found)."""
    evidence: str
    """What computes, e.g. ``loop 'for'`` or ``intrinsic '_mm256_add_ps'``."""


_ALLOWED_TORCH = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "TensorOptions", "Device", "device", "dtype", "Tensor", "IntArrayRef", "Scalar", "ScalarType", "Layout",
    "getCurrentCUDAStream", "getDefaultCUDAStream", "CUDAGuard", "OptionalCUDAGuard", "DeviceGuard",
    "OptionalDeviceGuard", "CUDAStreamGuard", "kCUDA", "kCPU", "kFloat", "kHalf", "kBFloat16", "kLong",
    "kInt", "kDouble", "kByte", "kBool", "Library", "dispatch", "class_", "jit", "check", "TORCH_CHECK",
    "from_blob", "tensor", "sparse_coo_tensor", "sparse_csr_tensor", "as_strided", "scalar_tensor",
})
"""``at::``/``torch::`` names a forwarding wrapper may use: allocation and construction (a sparse
gradient packed from the kernel's rows), options, device and stream."""
_ALLOWED_METHODS = frozenset({
    "data_ptr", "data", "const_data_ptr", "mutable_data_ptr", "size", "sizes", "numel", "dim", "ndimension",
    "stride", "strides", "device", "dtype", "scalar_type", "options", "is_cuda", "is_cpu", "is_contiguous",
    "contiguous", "get_device", "defined", "element_size", "storage_offset", "type", "def", "impl",
    "def_static", "def_readwrite", "def_readonly", "def_property", "doc", "attr", "value", "has_value",
    "c_str", "str", "stream", "index", "layout", "requires_grad", "is_sparse", "itemsize", "nbytes",
    "push_back", "emplace_back", "reserve", "begin", "end", "what", "get", "first", "second",
    "reshape", "view", "view_as", "flatten", "unsqueeze", "squeeze", "expand", "expand_as", "permute",
    "transpose", "t", "narrow", "select", "to", "cpu", "cuda", "clone", "copy_", "zero_", "fill_",
})
"""Tensor and binding methods a forwarding wrapper may call: inspection, binding, containers, views,
conversion and copies, initialisation of an output (computing with torch is an operator call)."""
_STD_COMPUTE = frozenset({
    "accumulate", "reduce", "transform", "transform_reduce", "inner_product", "partial_sum",
    "inclusive_scan", "exclusive_scan", "adjacent_difference", "for_each", "for_each_n", "sort",
    "stable_sort", "partial_sort", "nth_element", "fill", "fill_n", "generate", "generate_n", "iota",
    "copy", "copy_n", "copy_if", "count", "count_if", "find", "find_if", "max_element", "min_element",
    "thread", "async", "memcpy", "memset", "memmove",
})
_KEYWORDS = frozenset({b"return", b"case", b"throw", b"co_return", b"co_yield", b"else", b"do"})
_LOOP = re.compile(rb"\b(?:for|while|do|goto)\b")
_SUBSCRIPT = re.compile(rb"(?:[\w)\]]|\.\s*\w+)\s*\[(?!\[)")
_UPDATE = re.compile(rb"\+\+|--|(?<![<>=!])(?:[-+*/%&|^]|<<|>>)=(?!=)")
_INTRINSIC = re.compile(rb"\b(?:_mm\d*_\w+|__m(?:64|128|256|512)\w*|__builtin_\w+|asm|__asm__|__asm|"
                        rb"v\w+q_[a-z]\d+\w*|_pdep_\w+|_pext_\w+|_bzhi_\w+)\b|^[ \t]*(?:#|%:)[ \t]*pragma\b|_Pragma\b",
                        re.M)
_QUALIFIED_CALL = re.compile(rb"\b(?:at|torch|c10)\s*::\s*(?:\w+\s*::\s*)*(\w+)\s*(?:<[^;{}()]*>\s*)?\(")
_STD_CALL = re.compile(rb"\bstd\s*::\s*(?:\w+\s*::\s*)*(\w+)\s*(?:<[^;{}()]*>\s*)?[({]")
_METHOD_CALL = re.compile(rb"(?:\.|->)\s*(\w+)\s*(?:<[^;{}()]*>\s*)?\(")
_HEAD_NAME = re.compile(rb"(~?[A-Za-z_]\w*)\s*(?:<[^;{}()]*>\s*)?\($")
_CONTAINER = re.compile(rb"\b(?:namespace|struct|class|union|enum)\b[^;{}()]*$|extern\s*\"\"\s*$|=\s*$")


def _body_evidence(body: bytes, name: bytes | None) -> str | None:
    """What in ``body`` computes (the first kind found), or None for a forwarding body."""
    for pattern, what in ((_LOOP, "loop"), (_INTRINSIC, "intrinsic"), (_UPDATE, "update of a value in place")):
        found = pattern.search(body)
        if found:
            return f"{what} {found.group().strip().decode('utf-8', 'replace')!r}"
    for found in _SUBSCRIPT.finditer(body):
        before = re.search(rb"(\w+)\s*$", body[:found.end() - 1])
        if before is None or before.group(1) not in _KEYWORDS:  # ``return [](...)`` opens a lambda
            return f"subscript (element access) {found.group().strip().decode('utf-8', 'replace')!r}"
    for call in _QUALIFIED_CALL.finditer(body):
        if call.group(1).decode() not in _ALLOWED_TORCH:
            return f"torch operator {call.group().decode('utf-8', 'replace').rstrip('( ')!r}"
    for call in _STD_CALL.finditer(body):
        if call.group(1).decode() in _STD_COMPUTE:
            return f"std algorithm {call.group(1).decode()!r}"
    for call in _METHOD_CALL.finditer(body):
        if call.group(1).decode() not in _ALLOWED_METHODS:
            return f"method {call.group(1).decode('utf-8', 'replace')!r}"
    if name and re.search(rb"(?<![\w.>:])" + re.escape(name) + rb"\s*\(", body):
        return f"recursion ({name.decode('utf-8', 'replace')!r} calls itself)"
    return None


def _function_name(head: bytes) -> bytes | None:
    """The name of the function whose body follows ``head`` (text up to its ``{``), if it is one."""
    head = re.sub(rb"\)\s*:(?!:)[^;{}]*$", b")", head.rstrip())  # a constructor's initialiser list
    head = re.sub(rb"\b(?:const|noexcept|override|final|mutable|volatile)\b|->[^;{}()]*$", b"", head).rstrip()
    if not head.endswith(b")"):
        return None
    depth = 0
    for index in range(len(head) - 1, -1, -1):
        depth += {ord(")"): 1, ord("("): -1}.get(head[index], 0)
        if depth == 0:
            named = _HEAD_NAME.search(head[:index + 1])
            return named.group(1) if named else b"<lambda>"
    return None


def computations(data: bytes) -> list[Computation]:
    """Every function body in the C, C++ or CUDA glue ``data`` that computes (see the module's doc)."""
    text = preprocessor.logical_text(data)
    found: list[Computation] = []
    index, start_of_statement = 0, 0
    while True:
        brace = text.find(b"{", index)
        if brace < 0:
            return found
        closing = text.find(b"}", index)
        if 0 <= closing < brace:  # the end of a container (namespace, extern "C", class)
            index = start_of_statement = closing + 1
            continue
        head = text[start_of_statement:brace]
        head = head[max(head.rfind(b";"), head.rfind(b"}")) + 1:]
        name = None if _CONTAINER.search(head) else _function_name(head)
        if name is None:
            index = start_of_statement = brace + 1  # a container or an initialiser: look inside
            continue
        end = _block_end(text, brace)
        evidence = _body_evidence(text[brace:end], None if name == b"<lambda>" else name)
        if evidence is not None:
            found.append(Computation(text.count(b"\n", 0, brace) + 1, name.decode("utf-8", "replace"), evidence))
        index = start_of_statement = end


def _block_end(text: bytes, brace: int) -> int:
    """Offset past the brace closing the one at ``brace`` (the end of the text if none)."""
    depth = 0
    for match in re.finditer(rb"[{}]", text[brace:]):
        depth += 1 if match.group() == b"{" else -1
        if depth == 0:
            return brace + match.end()
    return len(text)


# --------------------------------------------------------------------------- Python glue

_PY_ALLOWED_TORCH = frozenset({"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like",
                               "full", "full_like", "device", "dtype", "Size", "tensor", "as_tensor"})
_PY_ALLOWED_METHODS = _ALLOWED_METHODS | {"load", "get_function", "format", "join", "split", "startswith",
                                          "endswith", "items", "keys", "values", "append", "extend", "update"}


def python_computations(data: bytes) -> list[Computation]:
    """Every function in the Python glue ``data`` that computes: a loop or comprehension, a
    subscript store, a ``torch.*`` operator other than allocation, a tensor method other than
    inspection. An unparseable file is one finding (it cannot be shown to be glue)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return [Computation(getattr(exc, "lineno", None) or 1, "<module>", f"unparseable ({type(exc).__name__})")]
    found = []
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            evidence = _python_evidence(function)
            if evidence is not None:
                name = function.name if not isinstance(function, ast.Lambda) else "<lambda>"
                found.append(Computation(function.lineno, name, evidence))
    return found


def _python_evidence(function: ast.AST) -> str | None:
    for node in ast.walk(function):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp,
                             ast.GeneratorExp)):
            return f"loop ({type(node).__name__}) at line {node.lineno}"
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            return f"subscript store at line {node.lineno}"
        if isinstance(node, ast.AugAssign):
            return f"update in place at line {node.lineno}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            root = owner
            while isinstance(root, ast.Attribute):
                root = root.value
            method = node.func.attr
            if isinstance(root, ast.Name) and root.id in ("torch", "F", "np", "numpy"):
                if method not in _PY_ALLOWED_TORCH:
                    return f"operator {ast.unparse(node.func)!r} at line {node.lineno}"
            elif method not in _PY_ALLOWED_METHODS:
                return f"method {method!r} at line {node.lineno}"
    return None
