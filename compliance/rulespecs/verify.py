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
ENTRY_NOT_RUN = CheckSpec(
    id="verify-entry-not-run", title="The declared kernel did not compute the output", default_level="error",
    stage="verify",
    doc="The verifier records which code ran during every call from outside the kernel's Python: a probe "
        "preloaded before the interpreter starts sees, on a GPU, every kernel launched (CUDA's profiling "
        "interface) and, on the CPU, every function of the kernel's own sources entered (they are compiled "
        "with -finstrument-functions). A call during which none of the kernel's `entry_symbols` ran (on a GPU, "
        "none of its `entry_symbols` or `helpers` kernel functions was launched: a plugin's entry is a host "
        "enqueue) - or "
        "the function that ran under that name is defined in a verification shim or build dependency, not "
        "in the kernel's `sources` - produced its output by other code (torch's own embedding_bag called by "
        "a patched runner, an honest function bound by a shim): that is evidence of a substituted "
        "implementation, as serious as a wrong output.",
    hint="Declare in `entry_symbols` the kernel (GPU) or function (CPU) of the shipped sources that computes "
         "the output, bind exactly that function, and keep shims to bindings and declarations.",
    passing="entry_symbols: [bag_fwd], bag_fwd defined in csrc/bag_fwd.cpp and bound by verify/binding.cpp",
    failing="verify/binding.cpp binds `bag_fwd` to an implementation of its own")
TREE_MODIFIED = CheckSpec(
    id="verify-tree-modified", title="The kernel's process changed the checked tree", default_level="error",
    stage="verify",
    doc="The verifier records every file of the checked tree (the declared files by hash) before any kernel "
        "runs and again after each kernel's process and its descendants are gone. A file added, removed or "
        "changed meanwhile was written by submission code: e.g. one kernel rewriting another's source to "
        "forge its verification. Every kernel is built from a private copy made before any of them ran, so "
        "such a write changes nothing that is verified; it is still an error.",
    hint="A kernel must not write outside its outputs; keep caches and logs out of the submission's tree.",
    passing="a kernel that writes only its output tensor",
    failing="open(\"../victim.cu\", \"w\") in a module initialiser")
ARTEFACT_CHANGED = CheckSpec(
    id="verify-artefact-changed", title="A build product changed after the build", default_level="error",
    stage="verify",
    doc="The verifier hashes each module it builds (from its private copy of the declared files, in a "
        "directory of this run keyed by every input) right after the build, and checks the hash again "
        "before each kernel's process gets a copy; the private copies of the declared files are checked "
        "the same way. A mismatch means code that ran earlier (another kernel's process) rewrote a build "
        "product or a copy: the kernel is not run from it.",
    hint="Nothing a kernel does may touch the verifier's build directory; re-run to see which kernel ran "
         "before this one.",
    passing="a build directory nothing but the compiler wrote", failing="a kernel that copies a module over "
            "another kernel's build")
NO_KERNEL_DECLARED = CheckSpec(
    id="verify-no-kernel-declared", title="Kernel code but nothing to verify", default_level="error",
    stage="verify",
    doc="`compliance verify` was asked to verify a tree that ships kernel code (CUDA, native extension or "
        "Triton sources the static check recognises) but declares no kernel in a kernel_manifest.yaml: "
        "nothing was verified, so the run cannot pass.",
    hint="Declare the kernel (`compliance manifest draft PATH`) with a `build:` block, or run "
         "`compliance check PATH` for the static findings.",
    passing="kernel_manifest.yaml declaring csrc/bag.cu", failing="csrc/bag.cu and no manifest")
COVERAGE_NARROW = CheckSpec(
    id="verify-coverage-narrow", title="Declared domain narrower than the rules' minimum",
    default_level="warning", stage="verify",
    doc="A rule set states, per kernel category, the minimum a verification must cover "
        "(`requires.verification.coverage`: dims, bag lengths, tables, modes, dtypes, index range; for DLRM "
        "embeddings at least the shapes MLPerf's DCNv2 reference uses). A kernel whose declared semantics "
        "or domain leave part of it out (`domain: {dims: [4]}`, `modes: [mean]` only) is verified only "
        "where it chose to be. An error in rule sets of rounds with a custom-kernel decision, a warning "
        "elsewhere; the finding lists what is missing and what was covered.",
    hint="Widen `semantics` and `semantics.domain` to at least the rule set's minimum (shown in the "
         "message), or explain in the submission why the kernel is never called outside its domain.",
    passing="domain: {dims: [128], lookups: {min: 1, max: 100}}", failing="domain: {dims: [4], lookups: 1}")
UNDECLARED_MODE = CheckSpec(
    id="verify-undeclared-mode", title="A mode the kernel is handed but does not declare gave a wrong result",
    default_level="error", stage="verify",
    doc="A kernel declares the pooling modes it computes (`semantics.modes`), and the verifier tests those. "
        "When the kernel's declared call interface hands it the mode (`mode` among `build.arguments`, in "
        "an expression, or a define selected by mode), nothing but the declaration keeps a caller from "
        "asking for another one, so the verifier also calls each undeclared mode once (after the declared "
        "cases, before the large table). The kernel must refuse it (raise, `TORCH_CHECK(mode == 0, ...)`; "
        "an NVRTC or Triton kernel, which cannot raise, writes no output element) or compute it as the "
        "reference does; an output that is wrong, unwritten or invalid for it is this "
        "finding (`modes: [sum]` hiding a wrong mean). A kernel whose interface cannot express a mode has "
        "nothing to hide: its verdict says which modes were covered.",
    hint="Refuse the modes the kernel does not implement (raise on any other mode value), or declare and "
         "implement them; or stop passing `mode` when the kernel computes one mode only.",
    passing="`modes: [sum]`, arguments [..., mode], and `TORCH_CHECK(mode == 0, \"sum only\")`",
    failing="`modes: [sum]`, arguments [..., mode], and the mode ignored: a mean call returns the sum")
