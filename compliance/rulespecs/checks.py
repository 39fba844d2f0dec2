"""The static checks' specs (rule id, level, doc, hint, examples), below the code that emits them.

They live apart from the checks so that the rule data (``compliance.ruleset`` and the registry)
never imports a check module, and a check module (which needs ``compliance.context``) sits above
them: no import circle. Each check module imports its own constants from here; the upstream and
verify stages keep theirs in ``compliance/rulespecs/upstream.py`` and ``compliance/rulespecs/verify.py``.
"""

from __future__ import annotations

from compliance.manifest import MANIFEST_NAME
from compliance.rulespecs.interface import CheckSpec

# compliance/checks/layout.py

STRUCTURE = CheckSpec(
    id="layout-structure", title="Submission directory structure", default_level="error",
    doc="Each organization must have the directories its layout requires (training: "
        "systems/, benchmarks/, results/; inference: systems/, code/, results/ under a "
        "division), and each benchmark directory must hold its implementations "
        "(training: benchmarks/<benchmark>/implementations/<impl>/). A tree where no "
        "organization can be found at all is reported once, at its root.",
    hint="Arrange the tree as <Org>/systems/<system>.json, "
         "<Org>/benchmarks/<benchmark>/implementations/<impl>/, "
         "<Org>/results/<system>/<benchmark>/result_N.txt.",
    passing="Acme/systems/dgx.json\nAcme/benchmarks/dlrm/implementations/pytorch/train.py\n"
            "Acme/results/dgx/dlrm/result_0.txt",
    failing="Acme/benchmarks/dlrm/train.py   (no systems/, results/ or implementations/)",
)

UNKNOWN_BENCHMARK = CheckSpec(
    id="layout-unknown-benchmark", title="Benchmark not in the round", default_level="error",
    doc="A benchmark directory (under benchmarks/ or results/<system>/) is not one of the "
        "round's benchmarks as listed by the rule set, so nothing in it can be judged "
        "against the round's allowlist.",
    hint="Rename the directory to the round's benchmark name (see `compliance rules show`), "
         "or check with the rule set for the right round (--rules).",
    passing="Acme/benchmarks/dlrm/...   (dlrm is a benchmark of the round)",
    failing="Acme/benchmarks/dlrm-v2/...",
)

UNKNOWN_SYSTEM = CheckSpec(
    id="layout-unknown-system", title="Results for an undescribed system", default_level="error",
    doc="A results/<system>/ directory has no matching systems/<system>.json description.",
    hint="Add systems/<system>.json or rename the results directory to the described system.",
    passing="Acme/systems/dgx.json and Acme/results/dgx/dlrm/result_0.txt",
    failing="Acme/results/dgx/dlrm/result_0.txt without Acme/systems/dgx.json",
)

VARIANT = CheckSpec(
    id="layout-variant", title="Layout variant of an accepted round", default_level="warning",
    doc="The tree uses a layout variant that accepted MLPerf submissions have used, not the "
        "canonical form; it is understood (kernels in it are checked like any other) and "
        "reported so a reviewer sees it. Variants: benchmark/ or code/ for benchmarks/; "
        "results/<system>/entry.json instead of systems/<system>.json; "
        "benchmarks/<b>/implementation/, implementation_closed/, implementation_open/ or "
        "benchmarks/<b>/<system>/ instead of (or beside) implementations/<impl>/; files directly "
        "under benchmarks/<b>/; the inverted benchmarks/implementations/<system>/<b>/; result "
        "files directly under results/<system>/ without a benchmark level; in inference trees, "
        "directories under code/ that are no model of the round (shared code such as "
        "code/common/ or code/plugin/; results must still name a model).",
    hint="Use the canonical form named in the message when you next submit; nothing else to do.",
    passing="Acme/benchmarks/dlrm/implementations/pytorch/train.py",
    failing="Acme/benchmark/dlrm/implementation_closed/train.py   (warning: two variants)",
)

ALIAS = CheckSpec(
    id="layout-benchmark-alias", title="Benchmark directory under an alias", default_level="warning",
    doc="A benchmark directory uses a name the round's rule set lists as an alias of one of its "
        "benchmarks (benchmark_aliases, e.g. dlrm_v2 or dlrm for dlrm_dcnv2, llm_finetune for "
        "llama2_70b_lora, resnet50 for resnet). It is understood as that benchmark. Inference "
        "rule sets report it as info, since the inference submission checker maps these names "
        "itself.",
    hint="Name the directory after the official benchmark named in the message.",
    passing="Acme/benchmarks/dlrm_dcnv2/...   (the official name)",
    failing="Acme/benchmarks/dlrm_v2/...   (alias of dlrm_dcnv2)",
)

# compliance/checks/declarations.py

MANIFEST_INVALID = CheckSpec(
    id="manifest-invalid", title="Kernel manifest does not follow its schema", default_level="error",
    doc=f"A {MANIFEST_NAME} could not be parsed or does not match the manifest schema "
        "(`compliance rules schema --manifest`), or is over the YAML limits (256 KiB, 64 levels "
        "of nesting, 20,000 nodes after alias expansion). A manifest with any schema error "
        "declares no kernels, so the code it meant to declare is reported as undeclared too.",
    hint="Fix the entry at the reported line; validate while editing with the schema "
         "(see docs/manifest.md).",
    passing="manifest_version: 1\nkernels:\n  - id: emb\n    category: dlrm-embedding\n    ...",
    failing="manifest_version: 1\nkernels:\n  - id: emb\n    language: cuda-c   # not a known language",
)

MANIFEST_MISPLACED = CheckSpec(
    id="manifest-misplaced", title="Kernel manifest outside an implementation", default_level="error",
    doc=f"A {MANIFEST_NAME} must sit inside an implementation directory "
        "(<Org>/benchmarks/<benchmark>/implementations/<impl>/), because the benchmark it "
        "belongs to decides which allowlist entries apply.",
    hint="Move the manifest into the implementation directory whose kernels it declares.",
    passing=f"Acme/benchmarks/dlrm/implementations/pytorch/{MANIFEST_NAME}",
    failing=f"Acme/{MANIFEST_NAME}",
)

UNDECLARED = CheckSpec(
    id="undeclared-kernel", title="Native kernel code no manifest declares", default_level="error",
    doc="The tree contains native kernel code (CUDA kernel entries in every spelling the CUDA front "
        "end accepts, read as the compiler reads C, C++ and CUDA: `__global__`, "
        "`__location__(global)`, `[[gnu::global]]`, macros expanding to one; inline PTX `asm(`, "
        "`@triton.jit` functions, torch extension sources, sources of a setup.py "
        "CUDAExtension/CppExtension) or a run-time compilation site (NVRTC in any binding or "
        "through ctypes, `load_inline(...)`/`cpp_extension.load(...)`, `torch.cuda.jiterator`, "
        "CuPy's raw and elementwise kernels, numba's `cuda.jit`, Triton's `jit`/`autotune`, "
        "TVM's and MXNet's run-time compilation) that is not listed as a source of any kernel in "
        "a manifest; a compilation site is one even when the source it compiles is not found. "
        "Detection is by content, not by file extension, and text is also read as a loader "
        "decodes it (JSON and Python string escapes, UTF-16/32 with a byte-order mark, base64). "
        "A vendored grouping never hides a file: only files of a catalogued or "
        "declared copy at paths upstream may have had are counted by `vendored-unproven` instead; "
        "files of such a copy that upstream never had (the catalogue's list of upstream native "
        "paths), and every native file of a tree grouped by a marker directory (`third_party/`, "
        "`submodules/`, ...) or a licence heuristic, are reported here one by one.",
    hint=f"Declare the kernel in the implementation's {MANIFEST_NAME} (id, category, language, "
         "sources, entry symbols, upstream, semantics), or remove the code.",
    passing=f"kernels/emb.cu listed under `sources:` of a kernel in {MANIFEST_NAME}",
    failing=f"kernels/emb.cu defines a __global__ function and no {MANIFEST_NAME} lists it",
)

NOT_ALLOWLISTED = CheckSpec(
    id="kernel-not-allowlisted", title="Kernel category not allowed for this benchmark and round",
    default_level="error",
    doc="A declared kernel's `category` is not an allowlist entry of the rule set, or the entry "
        "does not cover the benchmark (or division) the kernel is submitted in.",
    hint="Use a category the round allows for this benchmark (`compliance rules show`), or "
         "replace the kernel with the framework's own op.",
    passing="category: dlrm-embedding in benchmarks/dlrm under training/v0.7",
    failing="category: dlrm-embedding in benchmarks/bert, or under training/v1.0",
)

LANGUAGE = CheckSpec(
    id="kernel-language-not-allowed", title="Kernel language not admitted by its category",
    default_level="error",
    doc="The allowlist entry admits only some kernel languages (cuda, cpp, triton, ptx); the "
        "declared kernel is written in another.",
    hint="Rewrite the kernel in an admitted language or ask the working group to extend the entry.",
    passing="language: cuda with an entry admitting [cuda]",
    failing="language: ptx with an entry admitting [cuda]",
)

REFERENCE_OP = CheckSpec(
    id="kernel-reference-op-not-allowed", title="Claimed reference op not covered by the category",
    default_level="error",
    doc="The kernel claims to compute a reference op (semantics.op) that its allowlist entry's "
        "verification requirement does not name, so it cannot be verified under this rule set.",
    hint="Declare the reference op the kernel really computes (embedding_bag or embedding).",
    passing="semantics: {op: embedding_bag} with reference_ops [embedding_bag, embedding]",
    failing="semantics: {op: embedding} with reference_ops [embedding_bag]",
)

SOURCE_MISSING = CheckSpec(
    id="kernel-source-missing", title="Declared kernel source does not exist", default_level="error",
    doc="A file listed in a kernel's `sources` is not a regular file in the tree (missing, a "
        "directory, or a symbolic link). Kernels must ship as source.",
    hint="Commit the source file at the declared path (paths are relative to the manifest).",
    passing="sources: [kernels/emb.cu] and kernels/emb.cu exists",
    failing="sources: [kernels/emb.cu] and only kernels/emb.o is committed",
)

SOURCE_OUTSIDE = CheckSpec(
    id="kernel-source-outside-tree", title="Declared kernel source outside the tree",
    default_level="error",
    doc="A declared source path is absolute or climbs out of the checked tree with `..`; the "
        "submission must contain its own kernel sources.",
    hint="Copy the source into the implementation directory and declare it by a relative path.",
    passing="sources: [kernels/emb.cu]",
    failing="sources: [../../../../other-org/kernels/emb.cu] or [/opt/src/emb.cu]",
)

SOURCE_EMPTY = CheckSpec(
    id="kernel-source-empty", title="Declared kernel source is empty", default_level="error",
    doc="A declared source file has no content other than whitespace.",
    hint="Commit the real source.",
    passing="kernels/emb.cu with the kernel's code",
    failing="kernels/emb.cu of 0 bytes",
)

ENTRY_SYMBOL = CheckSpec(
    id="kernel-entry-symbol-missing", title="Declared entry symbol not defined in the sources",
    default_level="error",
    doc="None of the kernel's declared sources mentions the declared entry symbol as a function "
        "(name followed by `(`, template arguments allowed), so the declaration does not describe "
        "the shipped code.",
    hint="Correct `entry_symbols` to the names of the kernel functions the sources define.",
    passing="entry_symbols: [embedding_bag_sum] and `__global__ void embedding_bag_sum(...)`",
    failing="entry_symbols: [embedding_bag_sum] and the source defines only `emb_sum(...)`",
)

GLUE_COMPUTES = CheckSpec(
    id="glue-computes", title="A declared build dependency or verification shim that computes",
    default_level="error",
    doc="A file a kernel's `build:` lists under `build_dependencies` or `verification_shims` is "
        "compiled with the kernel or binds it for verification, so it may hold bindings and "
        "declarations only (PYBIND11_MODULE, TORCH_LIBRARY, includes, forward declarations) and "
        "thin wrappers that forward to the kernel's entry points. A function body in it with a "
        "loop, a subscript, an in-place update, an intrinsic (`_mm256_*`), inline asm, a pragma, "
        "a torch operator or tensor method other than allocation and inspection, a std algorithm "
        "or recursion computes (compliance/glue.py states the rule); a shim that computes can "
        "stand in for the kernel it claims to bind. Headers of the tree that such a file reaches by "
        "`#include` (beside it or in the kernel's `include_dirs`, to the compiler's depth) are glue "
        "too, unless a kernel lists them under `sources`; the finding names the including file.",
    hint="Move the computation into a declared kernel source (and declare it), or keep only the "
         "binding and a wrapper that forwards to the kernel's launcher.",
    passing="bind.cpp: `at::Tensor f(at::Tensor w) { auto out = at::empty_like(w); f_launch(w.data_ptr<float>(), "
            "out.data_ptr<float>(), w.numel()); return out; }` and PYBIND11_MODULE",
    failing="bind.cpp (under verification_shims) computes the embedding bag with `_mm256_add_ps` in a loop",
)


VENDORED = CheckSpec(
    id="vendored-unproven", title="Vendored copy not proven upstream", default_level="warning",
    doc="A catalogued copy of an upstream project (NCCL, apex, CUTLASS, maskrcnn-benchmark, ...; "
        "recognised from signature files of real size, never from one empty marker) or a tree "
        "declared under `vendored:` holds native files at paths upstream may have had. A static "
        "check cannot prove they are upstream's code, so they are counted here, one finding per "
        "tree, at warning level; `compliance check --upstream` compares each file's git blob with "
        "the declared repository and commit, and every file that is not byte-identical there is "
        "the submitter's own (`upstream-vendored-differs`). With `--upstream` an undeclared copy "
        "cannot be proven and with `--require-upstream` (for gates) no copy counts as proven "
        "without it: both make this finding an error. Native files of a copy that upstream never "
        "had are not counted here: they are `undeclared-kernel` errors one by one.",
    hint=f"Declare the copy under `vendored:` (path, repository, commit) in the {MANIFEST_NAME} "
         "and run `compliance check --upstream` to prove it.",
    passing="no copy, or third_party/apex declared and proven with --upstream",
    failing="third_party/apex with 300 native files and no --upstream run",
)

# compliance/checks/binaries.py

WITHOUT_SOURCE = CheckSpec(
    id="binary-without-source", title="Binary that nothing in the tree builds", default_level="error",
    doc="A compiled artifact (ELF shared object, object file or executable, cubin, fatbin, `ar` "
        "archive, PE or Mach-O; recognised by magic bytes whatever its name, in build directories "
        "such as `build/temp.*` and `build/lib.*` too) that nothing in the tree builds. A binary is "
        "built by the tree when, in its implementation (or its directory outside one), there is "
        "(1) a plausible source of the same stem (`graph_lib.so` and `graph_lib.cc`; `lib` prefixes "
        "and `.cpython-*` suffixes ignored), (2) a setup.py `Extension`/`CppExtension`/"
        "`CUDAExtension` named like it whose sources are present and plausible, or (3) a build "
        "file (CMakeLists.txt, *.cmake, Bazel BUILD, Makefile, *.mk) that names its stem and lists "
        "a plausible source present in the tree, or (4) a rule of a Makefile of any name (`Makefile.txt`, "
        "`*.mk`) in its directory or above whose target or `-o` output matches it (variables such as "
        "`$(ARCH)` match any name part; pattern rules) and whose sources are present and plausible, "
        "or (5) a CMake `add_library`/`add_executable` target of its organization whose sources are "
        "present and plausible: a static library wherever it lies when its members are the objects "
        "of the target's sources (`loadgen.cc.o`; sources under CMake's binary directory are written "
        "by the build), a shared library or executable of the target's name under the "
        "CMakeLists.txt's directory. "
        "A container (zip, wheel, tar, gzip/bzip2/xz/zstd, `.deb`) is a binary only through a "
        "compiled member, named in the message; one that cannot be opened is judged as a whole. "
        "*Plausible* means at least "
        "40 bytes of code once comments and whitespace are removed: an empty or decoy "
        "`.cu` beside a binary builds nothing. A binary whose own name has a source or text "
        "extension (an ELF named `emb.cu`) is never a build product, and a manifest's `binaries:` "
        "listing alone proves no source. Binary-only kernels are not allowed. The level is set by "
        "the rule set's `binary_policy.without_source`.",
    hint="Remove the binary and ship its source (declared in the manifest); the tool builds "
         "from source when verifying.",
    passing="kernels/emb.cu committed (and no emb.so)",
    failing="lib/libemb.so committed with no emb.cu anywhere in the implementation",
)

WITH_SOURCE = CheckSpec(
    id="build-products-committed", title="Committed build products", default_level="warning",
    doc="Compiled artifacts that something in the tree builds (see `binary-without-source` for "
        "what counts), committed anyway: one finding per directory (for a vendored tree, one for "
        "the whole tree), listing the products. Build products are never used by verification and "
        "make review harder. The level is set by the rule set's "
        "`binary_policy.build_product_with_source`.",
    hint="Delete the build products from the submission and build them from source at run time.",
    passing="kernels/emb.cu only",
    failing="kernels/emb.cu and kernels/emb.o; build/temp.linux-x86_64-3.8/kernels/emb.o",
)

TOOL_ARTEFACTS = CheckSpec(
    id="build-tool-artefacts", title="Committed build-tool artefacts", default_level="warning",
    doc="Binaries a build tool makes for itself, committed with a build cache: CMake's compiler "
        "identification and ABI probes (under `CMakeFiles/`, holding CMake's `INFO:compiler[`/`INFO:abi[` "
        "strings), Bazel's install base (`_embedded_binaries` beside `A-server.jar`, `build-label.txt` "
        "or `install_base_key`) and Bazel's `external/` downloads (in an output base holding `execroot/` "
        "or `DO_NOT_BUILD_HERE`). They are no submitter's kernel, but they are no source either: one "
        "finding per cache directory, listing them.",
    hint="Delete the build cache from the submission; the build tool recreates it.",
    passing="CMakeLists.txt and the sources only",
    failing="build/CMakeFiles/3.22.1/CompilerIdCUDA/a.out; bazel-cache/install/<md5>/_embedded_binaries/linux-sandbox",
)

SYMLINK = CheckSpec(
    id="symlink-escapes-tree", title="Symbolic link leaving the tree", default_level="error",
    doc="A symbolic link resolves (or would resolve) outside the checked tree. The tool never "
        "follows links; a submission must contain what it uses.",
    hint="Replace the link with the file it points to, or remove it.",
    passing="kernels/common.cuh -> ../include/common.cuh (inside the tree)",
    failing="kernels/emb.cu -> /home/me/src/emb.cu",
)

# compliance/checks/upstream_links.py

MISSING = CheckSpec(
    id="upstream-missing", title="Upstream link missing", default_level="error",
    doc="The kernel's allowlist entry requires an upstream link (the kernel must be available "
        "to others in a public repository) and the manifest declares none.",
    hint="Add `upstream: {repository: https://github.com/<owner>/<repo>, commit: <40-hex>, "
         "paths: [<path of each source upstream>]}`.",
    passing="upstream: {repository: https://github.com/acme/kernels, commit: 3f2a…(40 hex), "
            "paths: [csrc/emb.cu]}",
    failing="(no upstream key) under a category with `requires.upstream: true`",
)

MALFORMED = CheckSpec(
    id="upstream-malformed", title="Upstream repository URL malformed", default_level="error",
    doc="The upstream repository is not a usable clone URL: it needs a scheme (https, ssh, git) "
        "or scp form (git@host:owner/repo), a host and an owner/repository path. Local paths and "
        "file:// URLs are accepted only when the rule set's upstream_policy.allow_local is true.",
    hint="Use the repository's https clone URL, e.g. https://github.com/<owner>/<repo>.",
    passing="https://github.com/acme/kernels",
    failing="github.com/acme   or   www.acme.com/kernels.zip",
)

HOST = CheckSpec(
    id="upstream-host-not-allowed", title="Upstream host not allowed", default_level="error",
    doc="The upstream repository is on a host that the rule set's upstream_policy.allowed_hosts "
        "does not list; upstreamed code must be where others can get it.",
    hint="Push the kernel to a repository on an allowed host (`compliance rules show` lists them).",
    passing="https://github.com/acme/kernels",
    failing="https://git.internal.acme.com/kernels",
)

NOT_PINNED = CheckSpec(
    id="upstream-not-pinned", title="Upstream not pinned to a full commit", default_level="error",
    doc="The upstream `commit` is not a full 40-hex commit hash. A branch or tag moves, and a "
        "short hash can become ambiguous; neither is a pin. Applies when the rule set's "
        "upstream_policy.require_commit is true.",
    hint="Replace it with the full hash: `git rev-parse <branch-or-tag>` in the upstream repository.",
    passing="commit: 0123456789abcdef0123456789abcdef01234567",
    failing="commit: main   or   commit: 0123abc",
)

# compliance/checks/vendoring.py

FORK = CheckSpec(
    id="implementation-fork", title="Implementation is a fork of a catalogued project",
    default_level="info",
    doc="An organization's or implementation's own root holds the signature files of an upstream "
        "project that submissions copy (compliance/catalogue/vendored.yaml: HugeCTR, "
        "maskrcnn-benchmark, ...). The implementation is then a fork of that project: it is named "
        "here so a reviewer knows where the code came from, and its native files are still checked "
        "one by one (a root is never grouped away as a vendored tree): a file whose content is a "
        "version of an upstream file (the blob catalogue) is proven upstream code, one at a path "
        "upstream had with content no upstream version had is named as a modified upstream file, "
        "and one at a path upstream never had is the submitter's.",
    hint="Declare the implementation's custom kernels in its kernel_manifest.yaml; "
         "`compliance vendored identify DIR` names the upstream commit the fork started from.",
    passing="Acme/benchmarks/dlrm/implementations/hugectr/ holding only Acme's own code",
    failing="Acme/benchmarks/dlrm/implementations/hugectr/HugeCTR/include/... (a HugeCTR fork)",
)


# compliance/checks/readability.py

PATH_UNREADABLE = CheckSpec(
    id="path-unreadable", title="Path the checker could not read", default_level="error",
    doc="The walk could not enter a directory or read a file (no permission, a path longer than "
        "the system's PATH_MAX, an I/O error), or a declared kernel source could not be read. "
        "Whatever it holds was not checked, so the tree cannot be shown compliant.",
    hint="Make every file and directory of the submission readable (`chmod -R a+rX`), and keep "
         "paths shorter than 4096 bytes.",
    passing="every directory mode 755, every file mode 644",
    failing="Acme/benchmarks/dlrm/implementations/pt/kernels/ with mode 000",
)

SETUP_UNPARSEABLE = CheckSpec(
    id="setup-py-unparseable", title="setup.py could not be parsed", default_level="error",
    doc="A setup.py that mentions extensions could not be parsed as Python (a syntax error, or "
        "nesting or size that exhausts the parser), so the CUDAExtension/CppExtension sources it "
        "may build are unknown. setup.py is only ever parsed, never run.",
    hint="Make setup.py plain, valid Python 3 that lists its extension sources literally.",
    passing="setup(ext_modules=[CUDAExtension('emb', ['emb.cu'])])",
    failing="setup.py with a syntax error, or an expression nested 100,000 levels deep",
)
KERNEL_FUNCTION = CheckSpec(
    id="kernel-function-undeclared", title="Kernel function in declared sources that is not declared",
    default_level="error",
    doc="A declared kernel is exactly what it declares: every kernel function defined by its sources "
        "and by the headers they `#include` from the tree (CUDA kernel entries in every spelling "
        "the CUDA front end accepts, macros expanded, comments and literals ignored, line "
        "continuations joined; Triton `@triton.jit`/`@jit` functions) must be one of its "
        "`entry_symbols` or its "
        "`helpers`, and each is judged by the category of the kernel that declares it. Anything "
        "else rides on another kernel's allowlist entry: an attention kernel listed as an extra "
        "source of an allowlisted DLRM embedding kernel, or a `__global__` appended to a declared "
        "source.",
    hint="Declare the function as a helper of this kernel if it belongs to it, declare it as its "
         "own kernel with its own category, or remove it.",
    passing="entry_symbols: [emb_fwd], helpers: [emb_bwd] and the sources define exactly those",
    failing="sources: [emb.cu, attention.cu] where attention.cu defines __global__ attn_fwd",
)
UNSHIPPED = CheckSpec(
    id="unshipped-source", title="Build script names sources the tree does not ship", default_level="error",
    doc="A setup.py extension (`CUDAExtension`, `CppExtension`, `Extension`, ...) builds from "
        "sources that resolve to nothing in the tree: a literal path that is not a file, a "
        "pattern (`glob.glob(os.path.join(extensions_dir, '*.cu'))`, `os.listdir(d)`, names "
        "assigned once, read from the AST, never run) over a directory the tree does not ship (an "
        "empty glob over a shipped directory is only an empty glob), or a path that is absolute or "
        "climbs out of the tree (`../../../../private/attn.cu`, `/opt/acme/attn2.cu`). Calls through "
        "a name bound only to extension classes (`extension = CUDAExtension`) count. The extension "
        "would build a kernel whose source is not shipped. Sources computed in ways the static reader "
        "does not follow are not reported, nor are setup.py files in a Bazel `external/` download. "
        "A listed source the setup.py writes before it builds is generated, not missing: it hands the "
        "path to `open` for writing, or to a function of a module beside it in the tree that opens "
        "that parameter for writing (LoadGen's `version_generator.py` writing "
        "`generated/version_generated.cc`).",
    hint="Commit the sources the build script compiles (or remove the extension).",
    passing="CUDAExtension('fast._C', glob.glob('csrc/*.cu')) and csrc/gather.cu committed",
    failing="CUDAExtension('fast._C', glob.glob('csrc/*.cu')) and no csrc/ directory",
)
PATH_UNSCANNED = CheckSpec(
    id="path-unscanned", title="Path the checker could not scan", default_level="error",
    doc="A file larger than the walk's limit for one file (1 GiB), a directory deeper than its "
        "limit (256 levels), or an entry that is not a regular file, directory or symlink (a "
        "FIFO, socket or device; also a kernel manifest that is any of these) could not be "
        "scanned. Whatever it holds was not checked, so the tree cannot be shown compliant.",
    hint="Remove the entry, or split the data so that no file exceeds the limit.",
    passing="every file under 1 GiB, plain files and directories only",
    failing="a 2 GiB results.json, or a FIFO named kernel_manifest.yaml",
)
METADATA_DIRECTORY = CheckSpec(
    id="metadata-directory-committed", title="Version-control or cache directory committed",
    default_level="warning",
    doc="A version-control directory (`.git`, `.hg`, `.svn`), an interpreter cache "
        "(`__pycache__`) or packaging metadata (`*.egg-info`) is part of the tree. Its files are "
        "examined like any other (a kernel or binary there is reported as such); this finding "
        "tells the reviewer it is there.",
    hint="Remove the directory from the submission (`git archive` or a clean copy never has it).",
    passing="a tree exported with `git archive`",
    failing="Acme/benchmarks/dlrm/implementations/torch/__pycache__/",
)
STRICTER_ROUND = CheckSpec(
    id="ruleset-stricter-round-fits", title="A stricter round also fits the tree", default_level="warning",
    doc="The rule set was named by the tree itself (a kernel manifest's `ruleset:`, a README or a "
        "file name at the root), and a stricter round whose benchmarks the tree also fits exists "
        "(stricter: more checks at error level in its rule data, e.g. undeclared kernels as "
        "errors). The tree was checked under that round as well; this finding gives its verdict. "
        "The round a submission is judged by is the reviewer's choice, not the submitter's.",
    hint="Name the round on the command line (`compliance check --rules training/v0.7 ...`); in CI "
         "always pass --rules.",
    passing="compliance check --rules training/v1.0 tree/",
    failing="a DLRM-only tree whose manifest says ruleset: training/v1.0 (training/v0.7 also fits)",
)
