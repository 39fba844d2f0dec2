"""The case matrix covers every declared combination and the reference-kernel edge cases."""

from __future__ import annotations

import sys

from compliance.manifest import Semantics
from compliance.verify.cases import DIMS, LONG_BAG, Case, generate_cases

FULL = Semantics(op="embedding_bag", modes=("sum", "mean", "max"), layouts=("fixed", "csr"),
                 weight_dtypes=("float32", "float16", "bfloat16"), index_dtypes=("int32", "int64"),
                 per_sample_weights=True, padding_idx=True, include_last_offset=(False, True))


def test_every_combination_and_edge_case() -> None:
    cases = generate_cases(FULL, seed=1)
    combos = {(c.weight_dtype, c.index_dtype, c.mode, c.layout) for c in cases}
    assert len(combos) == 3 * 2 * 3 * 2
    assert {c.dim for c in cases} >= set(DIMS)
    tags = {t for c in cases for t in c.tags}
    assert tags >= {"dims", "empty-bags", "L1", "L1000", "batch1", "duplicates", "padding", "psw",
                    "last-offset", "no-last-offset", "large-table"}
    assert any(c.layout == "csr" and 0 in c.bag_lengths and c.mode == "mean" for c in cases)
    assert any(c.pooling == LONG_BAG or LONG_BAG in c.bag_lengths for c in cases)
    assert all(not c.per_sample_weights or c.mode == "sum" for c in cases)
    assert {c.include_last_offset for c in cases if c.layout == "csr"} == {False, True}
    large = [c for c in cases if c.large]
    assert len(large) == 1 and large[0].num_embeddings * large[0].dim > 2**31
    assert large[0].weight_dtype in ("float16", "bfloat16")  # the narrowest declared dtype
    assert len({c.id for c in cases}) == len(cases)


def test_only_declared_features() -> None:
    sem = Semantics(op="embedding_bag", modes=("sum",), layouts=("fixed",))
    cases = generate_cases(sem, seed=2, large=False)
    assert {(c.mode, c.layout, c.weight_dtype, c.index_dtype) for c in cases} == {("sum", "fixed", "float32", "int64")}
    assert not any(c.padding_idx is not None or c.per_sample_weights or c.large for c in cases)


def test_reproducible_from_seed_and_fresh_otherwise() -> None:
    first, again, other = (generate_cases(FULL, s) for s in (7, 7, 8))
    assert first == again
    assert [c.seed for c in first] != [c.seed for c in other]
    assert all(Case.from_json(c.to_json()) == c for c in first)


def test_scalars_describe_the_case() -> None:
    case = next(c for c in generate_cases(FULL, 3) if "last-offset" in c.tags)
    s = case.scalars()
    assert s["num_offsets"] == case.num_bags + 1 and s["include_last_offset"] == 1
    assert s["num_indices"] == sum(case.bag_lengths) and s["csr"] == 1 and s["pooling"] == 0


def test_embedding_matrix() -> None:
    sem = Semantics(op="embedding", weight_dtypes=("float16",), index_dtypes=("int32", "int64"),
                    output_shape="batched")
    cases = generate_cases(sem, 4)
    assert {c.layout for c in cases} == {"batched"} and {c.index_dtype for c in cases} == {"int32", "int64"}
    assert any(c.num_bags == 1 and c.pooling == 1 for c in cases) and any(c.large for c in cases)


def test_planning_imports_no_torch() -> None:
    import subprocess

    code = ("import sys; from compliance.verify.cases import generate_cases; "
            "from compliance.verify.driver import plan; import compliance.pytest_plugin; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_output_dtypes_and_tables() -> None:
    from compliance.semantics import Tables

    sem = Semantics(op="embedding_bag", modes=("sum",), layouts=("fixed", "csr"),
                    weight_dtypes=("float32", "float16"), output_dtypes=("float16", "float32"), tables=Tables())
    cases = generate_cases(sem, 5)
    assert {(c.weight_dtype, c.out_dtype) for c in cases} == {(w, o) for w in ("float32", "float16")
                                                              for o in ("float16", "float32")}
    for c in cases:
        assert c.num_tables >= 2 and sum(c.table_rows) == c.num_embeddings and c.num_bags % c.num_tables == 0
        if c.layout == "csr":
            assert len(c.bag_lengths) == c.num_bags
    large = next(c for c in cases if c.large)
    assert large.table_rows[0] * large.dim > 2**31  # the big table first: later offsets pass 2^31 elements


def test_backward_cases_have_no_max_and_no_large_table() -> None:
    from compliance.semantics import Backward

    sem = Semantics(op="embedding_bag", modes=("sum", "max"), layouts=("csr",), backward=Backward("sgd"))
    cases = generate_cases(sem, 6)
    assert cases and all(c.mode == "sum" and c.backward == "sgd" and not c.large for c in cases)
    assert all(0 < c.learning_rate < 1 and (c.learning_rate * 64).is_integer() for c in cases)


def test_contradictory_domain_is_refused() -> None:
    import pytest

    from compliance.semantics import Domain, Span
    from compliance.verify.cases import DomainError

    sem = Semantics(op="embedding_bag", modes=("sum",), layouts=("fixed",), domain=Domain(lookups=Span(5, 2)))
    with pytest.raises(DomainError, match="min 5 > max 2"):
        generate_cases(sem, 1)
    with pytest.raises(DomainError, match="not table-batched"):
        generate_cases(Semantics(op="embedding", domain=Domain(tables=Span(26, 26))), 1)
