"""Rule ids of the verification stage (declarations only, listed in ``compliance.rulespecs.registry``)."""

from __future__ import annotations

from compliance.rulespecs.interface import CheckSpec

_BUILD = ("kernels:\n  - id: bag\n    ...\n    build: {kind: torch_extension, function: bag_forward, "
          "arguments: [weight, indices, offsets, mode, out]}")

PASSED = CheckSpec(
    id="verify-passed", title="Kernel verified", default_level="info", stage="verify",
    doc="Every generated case of the kernel matched the float64 torch reference within the error "
        "bound of its dtype, on both runs, without touching its inputs or memory outside its output. "
        "The finding records the seed, the number of cases and the worst error relative to its bound.",
    hint="Nothing to fix; keep the seed with the submission's evidence.",
    passing="a kernel equal to torch.nn.functional.embedding_bag on every case",
    failing="(this rule never fails; see the other verify-* rules)")
BUILD_MISSING = CheckSpec(
    id="verify-build-missing", title="Declared kernel has no build block", default_level="error",
    stage="verify",
    doc="Verification was asked for, but the kernel's manifest entry has no `build:` block, so the tool "
        "cannot build it from its sources. Kernels are only ever built from the declared source, never "
        "from a shipped binary.",
    hint="Add a `build:` block (kind torch_extension, nvrtc or triton) to the kernel; see docs/verification.md.",
    passing=_BUILD, failing="kernels:\n  - id: bag\n    ...  # no build")
BUILD_INVALID = CheckSpec(
    id="verify-build-invalid", title="Build block unusable", default_level="error", stage="verify",
    doc="The `build:` block is well-formed but cannot be used: an expression does not parse or names a "
        "word outside the argument vocabulary, a build source is not one of the kernel's declared "
        "sources, a path leaves the tree, an NVRTC kernel gets no `out`, or a launch configuration "
        "evaluates outside the hardware limits for a case, or the declared domain (`semantics.domain`) "
        "leaves no case to run.",
    hint="Fix the expression or path named in the message; `compliance rules schema --manifest` shows the "
         "shape and docs/verification.md the vocabulary.",
    passing="grid: ceil_div(num_bags * 32, 256)", failing="grid: __import__('os')")
BUILD_FAILED = CheckSpec(
    id="verify-build-failed", title="Kernel does not build", default_level="error", stage="verify",
    doc="Compiling the declared sources failed (NVRTC or the C++/CUDA compiler through "
        "torch.utils.cpp_extension), or the built module lacks the declared function. The finding "
        "quotes the compiler log.",
    hint="Make the shipped sources build with the declared flags, exactly as they are in the tree.",
    passing="sources that compile", failing="a source with a syntax error")
CRASH = CheckSpec(
    id="verify-crash", title="Kernel crashed or raised", default_level="error", stage="verify",
    doc="The kernel raised an error on a valid input, its process died (segmentation fault, illegal "
        "memory access, abort), or a CUDA error stopped the run. The log excerpt shows what happened; "
        "later cases of that kernel are not run when the process or the CUDA context is gone.",
    hint="Reproduce with the printed seed and `--kernel ID`; an illegal address usually means an "
         "index or offset computed in 32 bits or a missing bounds check.",
    passing="a kernel that handles every generated case", failing="int off = idx * dim; // overflows")
TIMEOUT = CheckSpec(
    id="verify-timeout", title="Kernel exceeded its time limit", default_level="error", stage="verify",
    doc="The build or the cases did not finish within the time limit (`build.time_limit_s`, "
        "`--time-limit`); the kernel's process group was killed. A hang in a kernel ends here.",
    hint="Look for a loop that never ends (e.g. on an empty bag); raise the limit only for a genuinely "
         "slow build.",
    passing="a kernel that returns", failing="while (true) {}")
MISMATCH = CheckSpec(
    id="verify-mismatch", title="Output differs from the reference", default_level="error",
    stage="verify",
    doc="At least one output element lies outside the error bound around the float64 torch reference "
        "(bound: float32 accumulation roundoff times the bag's absolute sum, plus the output dtype's "
        "rounding; zero for max mode and unpooled lookups). The finding lists the cases, the largest "
        "error against its bound and the first mismatching positions.",
    hint="Reproduce the first listed case with the printed seed and compare with "
         "torch.nn.functional.embedding_bag; check empty bags, mean of padding-only bags and row tails.",
    passing="mean of an empty bag = 0", failing="mean of an empty bag = NaN (0/0)")
UNWRITTEN = CheckSpec(
    id="verify-unwritten", title="Output elements never written", default_level="error", stage="verify",
    doc="Outputs are prefilled with NaN; elements still NaN after the kernel ran were never written "
        "(a partial write, a kernel that does nothing, a missed tail).",
    hint="Make every output element written, including empty bags (zeros) and the last columns.",
    passing="every element written", failing="loop over cols < dim - dim % 4 only")
INPUT_MODIFIED = CheckSpec(
    id="verify-input-modified", title="Kernel modified its inputs", default_level="error",
    stage="verify",
    doc="The kernel gets copies of its inputs; after the call every input buffer (guard bands included) "
        "must be byte-identical to the pristine copy. A kernel that writes its table, indices, offsets "
        "or per-sample weights does not compute the reference op.",
    hint="Treat every input as const; use scratch memory of your own.",
    passing="const float* weight", failing="weight[i] *= 2")
OUT_OF_BOUNDS_WRITE = CheckSpec(
    id="verify-out-of-bounds-write", title="Kernel wrote outside its output", default_level="error",
    stage="verify",
    doc="The output lives between guard bands; a kernel that changed a guard byte wrote outside the "
        "output tensor.",
    hint="Check the output index arithmetic and the tail of each row.",
    passing="out[bag * dim + col] for col < dim", failing="out[bag * dim + col] for col < dim + 4")
OUTPUT_INVALID = CheckSpec(
    id="verify-output-invalid", title="Returned output unusable", default_level="error", stage="verify",
    doc="An extension function that returns its output returned something other than a fresh tensor of "
        "the reference's shape and dtype: a wrong shape or dtype (a gradient in the wrong dtype included), "
        "a view of an input, or the same memory it returned for an earlier call (a cached result); or the "
        "kernel's process sent back a result file that is not tensors of the expected form.",
    hint="Allocate and return a new output tensor on every call.",
    passing="return torch::empty({B, D}, weight.options()) filled", failing="static Tensor cached; return cached;")
NONDETERMINISTIC = CheckSpec(
    id="verify-nondeterministic", title="Runs differ", default_level="warning", stage="verify",
    doc="Every case runs twice on identical fresh copies of its inputs; the two outputs differ in at "
        "least one bit. Both may be within the bound (e.g. atomics in a different order), so this is a "
        "warning by default; a rule set may make it an error.",
    hint="Use a fixed reduction order if results must be reproducible.",
    passing="a fixed reduction order", failing="atomicAdd into the output")
SKIPPED = CheckSpec(
    id="verify-skipped", title="Kernel could not be verified here (allowed)", default_level="warning",
    stage="verify",
    doc="Verification was asked for with `--allow-unverified` and this machine cannot run the kernel: "
        "torch is not installed, or the kernel needs an NVIDIA GPU and none is visible. The kernel is "
        "neither passed nor failed; run the verification on a machine that has what it needs. Without "
        "`--allow-unverified` the same situation is the error verify-not-run.",
    hint="Install the `kernels` extra (torch), or run on a GPU machine for CUDA kernels.",
    passing="compliance verify on a GPU machine", failing="compliance verify of a CUDA kernel on a laptop")
NOT_RUN = CheckSpec(
    id="verify-not-run", title="Verification asked for but not done", default_level="error", stage="verify",
    doc="`check --verify` (or `compliance verify`) was asked to verify the kernels, and a declared kernel "
        "could not be verified on this machine: torch is not installed, the kernel needs an NVIDIA GPU and "
        "none is visible, or its runtime (NVRTC bindings, Triton) is missing. Nothing was checked, so the "
        "run cannot pass; `compliance verify` exits 4 (not verified) instead of 1 when this is the only "
        "error. `--allow-unverified` turns it into the warning verify-skipped. The verifier's own process "
        "decides this before the kernel's process starts: nothing the submission's code writes can claim it.",
    hint="Run the verification where the kernel can run (a GPU machine for CUDA kernels, torch installed), "
         "or pass --allow-unverified to accept that it was not verified.",
    passing="compliance verify on a GPU machine", failing="compliance verify of a CUDA kernel on a laptop")
GRADIENT_ROWS = CheckSpec(
    id="verify-gradient-rows", title="Sparse gradient on the wrong rows", default_level="error", stage="verify",
    doc="A backward kernel that returns its gradient as a sparse COO tensor (`gradient: sparse_coo`) or as row "
        "ids with their rows (`gradient: rows`): after coalescing, the row ids differ from the rows the batch "
        "references (table offsets included), or lie outside the table. The message names the rows returned "
        "that no lookup references, the referenced rows that are missing and, for table-batched kernels, "
        "the tables they belong to.",
    hint="Add each table's row offset to the indices you return (table_offsets[t] + index), and keep every "
         "lookup's row.",
    passing="indices = indices + table_offsets[table_of_lookup]", failing="indices returned without the offset")
UPDATE_MISMATCH = CheckSpec(
    id="verify-update-mismatch", title="Fused update wrong on a touched row", default_level="error",
    stage="verify",
    doc="A fused backward pass (`semantics.backward.kind` sgd or rowwise_adagrad) updates the table in place. "
        "The verifier runs it on a copy of the table and computes the update in float64 from the same "
        "gradient; a row the batch references lies outside the bound (float32 accumulation of the row's "
        "gradient terms, learning-rate product, rounding to the table dtype), or the optimizer state (the "
        "row-wise Adagrad accumulator) does. The message separates rows referenced once from rows referenced "
        "several times: wrong only on the latter is a kernel that loses duplicate updates (a race without "
        "atomics).",
    hint="Accumulate every lookup's gradient into its row (atomics or a sorted segment reduction), subtract "
         "learning_rate times it, and reproduce the first listed case with the printed seed.",
    passing="atomicAdd(&w[row * D + c], -lr * g)", failing="w[row * D + c] = w0[row * D + c] + lr * g")
UNTOUCHED_MODIFIED = CheckSpec(
    id="verify-untouched-row-modified", title="Fused update changed a row the batch does not use",
    default_level="error", stage="verify",
    doc="After a fused optimizer update every row of the table that no index of the batch references (and "
        "its optimizer state) must be byte-identical to its value before the call: an optimizer step with a "
        "zero gradient is not an update, and a kernel that decays or rewrites every row does not compute "
        "the declared sparse update.",
    hint="Update only the rows the indices reference; leave every other row and its state alone.",
    passing="for each referenced row: w[row] -= lr * g[row]", failing="for every row: w[row] -= lr * g[row]")
ACCUMULATION_PRECISION = CheckSpec(
    id="verify-accumulation-precision", title="Kernel accumulates in 16-bit precision",
    default_level="error", stage="verify",
    doc="Every kernel is held to float32 accumulation. The outputs that lie outside the float32 bound do lie "
        "inside the bound of accumulating in the 16-bit table or output dtype (float16, bfloat16), and the "
        "failing cases are the long bags: the kernel sums in half precision. The same cases are also listed "
        "under verify-mismatch.",
    hint="Convert each row to float32 before adding (`float acc`), and round to the output dtype once.",
    passing="float acc = 0; acc += float(w[i])", failing="at::Half acc = 0; acc += w[i]")
