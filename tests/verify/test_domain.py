"""Property: whatever domain a kernel declares, no generated case leaves it (a kernel that only
works inside its domain is never run outside it), and the edge cases are mapped into it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from compliance.manifest import Semantics
from compliance.semantics import DimRange, Domain, Span, Tables
from compliance.verify.cases import LONG_BAG, generate_cases

spans = st.builds(lambda low, extra: Span(low, None if extra is None else max(1, low + extra)),
                  st.integers(0, 40), st.none() | st.integers(0, 40))
domains = st.builds(Domain, dims=st.lists(st.integers(1, 300), unique=True, max_size=3).map(tuple),
                    lookups=spans, batch_multiple=st.integers(1, 8),
                    tables=st.builds(lambda low, extra: Span(low, low + extra), st.integers(1, 30), st.integers(0, 5)),
                    max_rows=st.none() | st.integers(1, 5000))
dim_ranges = st.none() | st.builds(lambda low, extra, step: DimRange(low, low + extra + step, step),
                                   st.integers(1, 300), st.integers(0, 900), st.integers(1, 16))


@settings(max_examples=60, deadline=None)
@given(domain=domains, layouts=st.sampled_from([("fixed",), ("csr",), ("fixed", "csr")]),
       tabled=st.booleans(), seed=st.integers(0, 2**31), dim_range=dim_ranges)
def test_cases_stay_inside_the_declared_domain(domain: Domain, layouts: tuple[str, ...], tabled: bool,
                                               seed: int, dim_range: DimRange | None) -> None:
    if not tabled:
        domain = Domain(domain.dims, domain.lookups, domain.batch_multiple, Span(), domain.max_rows)
    if dim_range is not None:  # a range instead of a list
        domain = Domain((), domain.lookups, domain.batch_multiple, domain.tables, domain.max_rows, dim_range)
    sem = Semantics(op="embedding_bag", modes=("sum", "mean"), layouts=layouts,
                    tables=Tables() if tabled else None, domain=domain)
    cases = generate_cases(sem, seed, large=True)
    assert cases
    for c in cases:
        assert not domain.dims or c.dim in domain.dims
        if dim_range is not None:
            assert dim_range.low <= c.dim <= dim_range.high and c.dim % dim_range.multiple_of == 0, c.dim
        assert c.batch_size % domain.batch_multiple == 0 and c.batch_size >= 1
        assert domain.tables.contains(c.num_tables)
        sizes = c.bag_lengths if c.layout == "csr" else (c.pooling,)
        assert all(domain.lookups.contains(n) for n in sizes), (c.id, sizes)
        assert domain.max_rows is None or max(c.table_rows or (c.num_embeddings,)) <= domain.max_rows
    longest = max(max(c.bag_lengths or (c.pooling,)) for c in cases)  # the long bag, mapped into the domain
    assert longest == domain.lookups.clamp(LONG_BAG + 1 if "csr" in layouts else LONG_BAG)
