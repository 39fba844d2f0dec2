// The compiled host path of the eager embedding_bag forward and of the table-batched module's
// (reference_kernels/host.py builds and loads it; docs/kernels.md, "Host overhead per call").
//
// It serves only the usual call, and only once the Python path has planned it: plain CUDA tensors
// (torch.Tensor or Parameter) on the current device, contiguous, no max_norm, no sync-mode check,
// no sparse gradient for embedding_bag (the table-batched module's sparse gradient and fused
// optimizers are served: their backward is the module's own), and a plan registered for the call's
// key by the Python path (offer). For every other call `bag` (and `tbe`) returns None and the caller runs the Python path, which validates, raises,
// plans and registers. A registered plan is the Python path's own: the same function, grid, block
// and argument layout (each kernel argument is a constant of the call or one of the call's values:
// the slots the Python packer was seen to use). Nothing is chosen here.
#include <Python.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

// Where a kernel argument comes from (as SOURCES in host.py).
enum Source : int {
  kConstant = 0, kWeight, kIndices, kOffsets, kOffsetsNumel, kPerSampleWeights, kPadding, kOut, kArgmax,
  kTableRows, kLock, kRecord, kFlag, kToken, kOp, kNumRows, kSources
};

struct Slot {
  int offset;       // byte offset in the parameter buffer
  int size;         // 8 or 4 bytes
  bool is_float;    // a 32-bit float parameter ('f'); constants only
  int source;
  int64_t constant;
  double constant_f;
};

struct Entry {
  uintptr_t function;  // CUfunction
  unsigned grid;
  unsigned block;
  size_t param_bytes;
  std::vector<Slot> slots;
};

// The check pass's compiled kernel for one (device, index dtype, clean dtype, table cap): its block,
// and the most blocks of its grid-stride launch (index_check.run_check's grid_stride_blocks cap).
struct CheckEntry {
  uintptr_t function;
  unsigned block;
  unsigned max_blocks;
};

// What the Python path's plan depends on (its BagKey), plus the device.
struct Key {
  int64_t weight_dtype, num_rows, dim, weight_align, out_aligned, index_dtype, bag_size, num_indices, num_bags,
      tables, table_batched, mode, has_psw, need_argmax, has_padding, checked, device;
  bool operator==(const Key& o) const { return std::memcmp(this, &o, sizeof(Key)) == 0; }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    const auto* words = reinterpret_cast<const int64_t*>(&k);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof(Key) / sizeof(int64_t); ++i) h = (h ^ static_cast<uint64_t>(words[i])) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

using LaunchFn = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                         void**);

// cuLaunchKernelEx's configuration, laid out as cuda.h's CUlaunchAttribute and CUlaunchConfig (this
// file includes no CUDA header). Every launch here asks for programmatic stream serialization once
// set_launch_ex gave the entry point: each kernel of the package waits for the previous one as its
// first statement (common.cuh, wait_for_previous_kernel), so the driver may overlap the launch.
struct LaunchAttribute {
  int id;
  char pad[4];
  unsigned char value[64];
};
struct LaunchConfig {
  unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
  void* stream;
  LaunchAttribute* attrs;
  unsigned num_attrs;
};
static_assert(sizeof(LaunchAttribute) == 72 && sizeof(LaunchConfig) == 56, "cuda.h's layout");
using LaunchExFn = int (*)(const LaunchConfig*, void*, void**, void**);
constexpr int kProgrammaticStreamSerialization = 6;  // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION

constexpr int kMaxDevices = 64;
constexpr int kCheckModes = 2;  // deferred, warn (sync stays on the Python path)
constexpr size_t kMaxPlans = 4096;
constexpr int kMaxParamBytes = 512;

struct State {
  LaunchFn launch = nullptr;
  LaunchExFn launch_ex = nullptr;  // cuLaunchKernelEx (set_launch_ex): programmatic launches; null: launch
  PyObject* current_device = nullptr;  // torch._C._cuda_getDevice
  PyObject* raw_stream = nullptr;      // torch._C._cuda_getCurrentRawStream
  PyObject* tokens = nullptr;          // index_check._TOKENS (itertools.count)
  PyObject* tuning_module = nullptr;   // reference_kernels.tuning (its _CURRENT: the knobs)
  PyObject* knobs_name = nullptr;      // "_CURRENT"
  PyObject* on_launch_error = nullptr; // host.raise_launch_error(err, grid, block)
  PyObject* knobs = nullptr;           // the knobs the registered plans were made under (borrowed id)
  PyObject* mode_names[3] = {nullptr, nullptr, nullptr};  // "sum", "mean", "max"
  // index_check.HOST_MODES: the CheckMode members of codes 0-3 (ignore, deferred, warn, sync)
  PyObject* check_modes[4] = {nullptr, nullptr, nullptr, nullptr};
  PyObject* transforms_active = nullptr;  // torch._C._are_functorch_transforms_active
  PyObject* backward = nullptr;           // ops.host_path_backward
  PyObject* tbe_backward = nullptr;       // tbe.host_path_backward
  PyObject* tbe_update = nullptr;         // tbe.host_path_update (sparse gradient or fused optimizer)
  PyObject* launch_module = nullptr;  // reference_kernels.launch (its POISON_OUTPUTS, read per call)
  PyObject* poison_name = nullptr;    // "POISON_OUTPUTS"
  const int64_t* flags = nullptr;  // index_check.FLAGS once pinned (one word per device)
  int64_t ledgers[kMaxDevices][kCheckModes][3] = {};  // lock, record, flag per device and mode; 0: none yet
  std::unordered_map<Key, Entry, KeyHash> plans;
  std::unordered_map<int64_t, CheckEntry> checks;  // check_key(device, index dtype, clean dtype, table cap)
  bool pending = false;  // the last call missed a plan: the Python path offers the plans it uses
  uint64_t served = 0;   // calls launched here (tests and diagnostics read it)
  bool cpu_as_device0 = false;  // tests without a GPU only (test_cpu_host_path.py): CPU tensors as device 0
};

State state;

int mode_code(PyObject* mode) {
  for (int i = 0; i < 3; ++i) {
    if (mode == state.mode_names[i]) return i;  // interned: identity first
  }
  if (!PyUnicode_Check(mode)) return -1;
  for (int i = 0; i < 3; ++i) {
    if (PyUnicode_Compare(mode, state.mode_names[i]) == 0) return i;
  }
  PyErr_Clear();
  return -1;
}

// 0 ignore, 1 deferred, 2 warn, 3 sync: the mode the caller resolved (a CheckMode member: the module
// fixed it at construction, the function resolved its argument); anything else is -1, left to the
// Python path. The environment is never read here.
int check_code(PyObject* check) {
  for (int i = 0; i < 4; ++i) {
    if (check == state.check_modes[i]) return i;
  }
  return -1;
}

bool plain_tensor(PyObject* obj) { return THPVariableClass != nullptr && THPVariable_CheckExact(obj); }

int64_t scalar_code(c10::ScalarType t) { return static_cast<int64_t>(t); }

// The knobs changed since the plans were registered: forget them (the Python path plans anew).
void follow_knobs() {
  if (state.tuning_module == nullptr) return;  // not bound yet (init)
  PyObject* knobs = PyObject_GetAttr(state.tuning_module, state.knobs_name);
  if (knobs == nullptr) {
    PyErr_Clear();
    return;
  }
  if (knobs != state.knobs) {
    state.plans.clear();
    state.checks.clear();  // their grids follow a knob too (check_blocks_per_sm)
    state.knobs = knobs;  // identity only; tuning keeps its objects alive while current
  }
  Py_DECREF(knobs);
}

int64_t call_int(PyObject* fn, PyObject* arg, bool* ok) {
  PyObject* result = arg == nullptr ? PyObject_CallNoArgs(fn) : PyObject_CallOneArg(fn, arg);
  if (result == nullptr) {
    *ok = false;
    return 0;
  }
  int64_t value = PyLong_AsLongLong(result);
  Py_DECREF(result);
  if (value == -1 && PyErr_Occurred()) *ok = false;
  return value;
}

PyObject* not_served() { Py_RETURN_NONE; }

// A tensor's CUDA device; -1 for any other tensor (CPU tensors count as device 0 only under
// cpu_as_device0, so that the CPU tests reach every step with a stand-in launcher).
int64_t cuda_index(const at::Tensor& t) {
  if (t.is_cuda()) return t.get_device();
  return state.cpu_as_device0 && t.is_cpu() ? 0 : -1;
}

// launch.POISON_OUTPUTS (the tests set it per test): fill the output with NaN before the kernel.
bool poison_outputs() {
  PyObject* value = PyObject_GetAttr(state.launch_module, state.poison_name);
  if (value == nullptr) {
    PyErr_Clear();
    return false;
  }
  const int truth = PyObject_IsTrue(value);
  Py_DECREF(value);
  if (truth < 0) PyErr_Clear();
  return truth == 1;
}


constexpr int64_t kInt32Limit = 2147483647;
constexpr int64_t kOpEmbeddingBag = 1;  // index_check.OPS: embedding_bag
constexpr int64_t kOpTableBatched = 3;  // index_check.OPS: TableBatchedEmbeddingBag
constexpr int64_t kTableCaps[3] = {64, 512, 4096};  // index_check.TABLE_CAPS

// index_check.table_cap: the check pass's TABLE_CAP for a table-batched call; -1 past the largest
// (the Python path then has torch compute the tables' spans).
int64_t table_cap(int64_t tables) {
  for (const int64_t cap : kTableCaps) {
    if (tables < cap) return cap;
  }
  return -1;
}

// A registered plan of the key; nullptr (and the Python path asked to offer one) when none is.
const Entry* find_plan(const Key& key) {
  const auto found = state.plans.find(key);
  if (found == state.plans.end()) {
    state.pending = true;
    return nullptr;
  }
  return &found->second;
}

int64_t check_key(int64_t device, at::ScalarType index_type, at::ScalarType clean_type, int64_t cap) {
  return (device << 32) | (cap << 16) | (scalar_code(index_type) << 8) | scalar_code(clean_type);
}

const CheckEntry* find_check(int64_t device, at::ScalarType index_type, at::ScalarType clean_type, int64_t cap) {
  const auto found = state.checks.find(check_key(device, index_type, clean_type, cap));
  if (found == state.checks.end()) {
    state.pending = true;
    return nullptr;
  }
  return &found->second;
}

// The driver call of every launch here: a 1-D grid, no dynamic shared memory, the parameters in
// the driver's `extra` array; programmatic (cuLaunchKernelEx) once set_launch_ex gave the entry point.
int driver_launch(void* function, unsigned grid, unsigned block, void* stream, void** extra) {
  if (state.launch_ex != nullptr) {
    LaunchAttribute attribute = {};
    attribute.id = kProgrammaticStreamSerialization;
    const int allowed = 1;
    std::memcpy(attribute.value, &allowed, sizeof(allowed));
    const LaunchConfig config = {grid, 1, 1, block, 1, 1, 0, stream, &attribute, 1};
    return state.launch_ex(&config, function, nullptr, extra);
  }
  return state.launch(function, grid, 1, 1, block, 1, 1, 0, stream, nullptr, extra);
}

bool launch(uintptr_t function, unsigned grid, unsigned block, void* buffer, size_t size, int64_t stream) {
  void* extra[5] = {reinterpret_cast<void*>(1), buffer, reinterpret_cast<void*>(2), &size, nullptr};
  const int err = driver_launch(reinterpret_cast<void*>(function), grid, block, reinterpret_cast<void*>(stream), extra);
  if (err == 0) return true;
  PyObject* raised = PyObject_CallFunction(state.on_launch_error, "iII", err, grid, block);
  Py_XDECREF(raised);  // it raises: the caller returns nullptr with its error set
  return false;
}

// launch_raw(function, grid, block, stream, extra) -> the CUresult: cuLaunchKernel of a kernel the
// Python path has packed (nvrtc.Params.pack: ``extra`` is the address of the driver's extra array),
// one dimension each, no dynamic shared memory. For the launches that stay on the Python path (the
// backward's preparation, sort and passes): the driver call without cuda-bindings' per-call
// wrapping (a result enum per call), which costs host time per launch (docs/perf/comment-figures.md).
PyObject* launch_raw(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 5 || state.launch == nullptr) {
    PyErr_SetString(PyExc_TypeError, "launch_raw takes 5 arguments, after init");
    return nullptr;
  }
  const unsigned long long function = PyLong_AsUnsignedLongLong(args[0]);
  const unsigned long grid = PyLong_AsUnsignedLong(args[1]);
  const unsigned long block = PyLong_AsUnsignedLong(args[2]);
  const unsigned long long stream = PyLong_AsUnsignedLongLong(args[3]);
  const unsigned long long extra = PyLong_AsUnsignedLongLong(args[4]);
  if (PyErr_Occurred()) return nullptr;
  const int err = driver_launch(reinterpret_cast<void*>(function), static_cast<unsigned>(grid),
                                static_cast<unsigned>(block), reinterpret_cast<void*>(stream),
                                reinterpret_cast<void**>(extra));
  return PyLong_FromLong(err);
}

// One registered lookup, its arguments packed from the call's values and its constants.
bool launch_entry(const Entry& entry, const int64_t* values, int64_t stream) {
  alignas(16) unsigned char buffer[kMaxParamBytes];
  std::memset(buffer, 0, entry.param_bytes);  // the gaps between parameters as struct.pack leaves them
  for (const Slot& slot : entry.slots) {
    if (slot.is_float) {
      const float f = static_cast<float>(slot.constant_f);
      std::memcpy(buffer + slot.offset, &f, 4);
    } else {
      const int64_t v = slot.source == kConstant ? slot.constant : values[slot.source];
      if (slot.size == 8) {
        std::memcpy(buffer + slot.offset, &v, 8);
      } else {
        const int32_t v32 = static_cast<int32_t>(v);
        std::memcpy(buffer + slot.offset, &v32, 4);
      }
    }
  }
  return launch(entry.function, entry.grid, entry.block, buffer, entry.param_bytes, stream);
}

// A check pass's tables: none (one table, embedding_bag's), or a table-batched call's sizes
// (spans scanned by the pass itself: a table cap, no spans from torch).
struct PassTables {
  int64_t sizes = 0, count = 0, bags_per_table = 1, op = kOpEmbeddingBag;
};

// The check pass (index_check.cu's index_check, as index_check.run_check launches it).
bool launch_check(const CheckEntry& pass, int64_t indices, int64_t n, int64_t num_rows, int64_t offsets,
                  int64_t n_off, int64_t clean, int64_t clean_offsets, const int64_t* ledger, int64_t token,
                  const PassTables& tables, int64_t stream) {
  // indices, n, num_rows, offsets, n_off, table_sizes, tables, bags_per_table, spans, clean,
  // clean_offsets, lock, record, flag, token, op: sixteen 8-byte parameters
  const int64_t args[16] = {indices, n, num_rows, offsets, n_off, tables.sizes, tables.count, tables.bags_per_table,
                            0, clean, clean_offsets, ledger[0], ledger[1], ledger[2], token, tables.op};
  const int64_t threads = n > n_off ? n : n_off;
  const int64_t wanted = (threads + pass.block - 1) / pass.block;
  const unsigned grid = static_cast<unsigned>(wanted < 1 ? 1 : (wanted > pass.max_blocks ? pass.max_blocks : wanted));
  alignas(16) int64_t buffer[16];
  std::memcpy(buffer, args, sizeof(args));
  return launch(pass.function, grid, pass.block, buffer, sizeof(buffer), stream);
}


// The autograd nodes of calls with a gradient: the Python path's backward (ops.host_path_backward,
// tbe.host_path_backward) on what the Python path's autograd Function saves.
using NodePtr = decltype(torch::autograd::Edge::function);

template <typename Ptr>
struct NodeMaker;
template <typename T>
struct NodeMaker<std::shared_ptr<T>> {
  template <typename U>
  static std::shared_ptr<U> make() { return std::make_shared<U>(); }
};
template <typename T>
struct NodeMaker<c10::intrusive_ptr<T>> {
  template <typename U>
  static c10::intrusive_ptr<U> make() { return c10::make_intrusive<U>(); }
};

// A Python backward's result, a tuple of ``count`` gradients (None or a tensor), as the node's
// outputs; the reference is stolen.
torch::autograd::variable_list gradients(PyObject* result, Py_ssize_t count) {
  if (result == nullptr) throw python_error();
  torch::autograd::variable_list out(static_cast<size_t>(count));
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* item = PyTuple_Check(result) && PyTuple_GET_SIZE(result) == count ? PyTuple_GET_ITEM(result, i) : nullptr;
    if (item != nullptr && THPVariable_Check(item)) out[static_cast<size_t>(i)] = THPVariable_Unpack(item);
  }
  Py_DECREF(result);
  return out;
}

struct BagBackward : public torch::autograd::Node {
  torch::autograd::SavedVariable weight, indices, offsets, per_sample_weights, argmax;
  int mode = 0;
  int64_t padding_idx = -1, num_weights = 0;
  bool include_last_offset = false, psw_needs_grad = false;

  std::string name() const override { return "ReferenceKernelsEmbeddingBagBackward"; }

  void release_variables() override {
    for (auto* saved : {&weight, &indices, &offsets, &per_sample_weights, &argmax}) saved->reset_data();
  }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    pybind11::gil_scoped_acquire gil;
    const at::Tensor& grad_out = grads[0];
    if (!grad_out.defined()) return {at::Tensor(), at::Tensor()};
    return gradients(PyObject_CallFunction(
        state.backward, "NNNNNNOLOLO", THPVariable_Wrap(grad_out), THPVariable_Wrap(weight.unpack()),
        THPVariable_Wrap(indices.unpack()), THPVariable_Wrap(offsets.unpack()),
        THPVariable_Wrap(per_sample_weights.unpack()), THPVariable_Wrap(argmax.unpack()), state.mode_names[mode],
        static_cast<long long>(padding_idx), include_last_offset ? Py_True : Py_False,
        static_cast<long long>(num_weights), psw_needs_grad ? Py_True : Py_False), 2);
  }
};

// What both table-batched nodes save of a call: its tables, the lookup's indices and offsets (the
// pass's copies when it checks), the per-sample weights and the mode.
struct TableBatchedNode : public torch::autograd::Node {
  torch::autograd::SavedVariable table_rows, indices, offsets, per_sample_weights;
  int mode = 0;

  void release_variables() override {
    for (auto* saved : {&table_rows, &indices, &offsets, &per_sample_weights}) saved->reset_data();
  }
};

// The backward of a table-batched call: the weight's gradient only (the op gives per-sample weights
// none, as the Python path's TBEFunction does).
struct TableBatchedBackward : public TableBatchedNode {
  int64_t num_weights = 0;

  std::string name() const override { return "ReferenceKernelsTableBatchedBackward"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    pybind11::gil_scoped_acquire gil;
    const at::Tensor& grad_out = grads[0];
    if (!grad_out.defined()) return {at::Tensor()};
    return gradients(PyObject_CallFunction(
        state.tbe_backward, "NNNNNOL", THPVariable_Wrap(grad_out), THPVariable_Wrap(table_rows.unpack()),
        THPVariable_Wrap(indices.unpack()), THPVariable_Wrap(offsets.unpack()),
        THPVariable_Wrap(per_sample_weights.unpack()), state.mode_names[mode], static_cast<long long>(num_weights)), 1);
  }
};

// The backward of a table-batched call of a module with a sparse gradient or a fused optimizer:
// the module's own (tbe.host_path_update, as its SparseTBE Function runs it) on what that Function
// saves; ``update`` is the module's fused optimizer state, or True for a sparse gradient.
struct TableBatchedUpdate : public TableBatchedNode {
  torch::autograd::SavedVariable weight;
  PyObject* update = nullptr;  // owned

  std::string name() const override { return "ReferenceKernelsTableBatchedUpdate"; }

  ~TableBatchedUpdate() override {
    if (update != nullptr && Py_IsInitialized()) {
      pybind11::gil_scoped_acquire gil;
      Py_DECREF(update);
    }
  }

  void release_variables() override {
    TableBatchedNode::release_variables();
    weight.reset_data();
  }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    pybind11::gil_scoped_acquire gil;
    const at::Tensor& grad_out = grads[0];
    if (!grad_out.defined()) return {at::Tensor()};
    return gradients(PyObject_CallFunction(
        state.tbe_update, "NNNNNNOO", THPVariable_Wrap(grad_out), THPVariable_Wrap(weight.unpack()),
        THPVariable_Wrap(table_rows.unpack()), THPVariable_Wrap(indices.unpack()), THPVariable_Wrap(offsets.unpack()),
        THPVariable_Wrap(per_sample_weights.unpack()), state.mode_names[mode], update), 1);
  }
};

// A table-batched node of type T on the weight's edge, holding what TableBatchedNode saves.
template <typename T>
auto table_batched_node(const at::Tensor& weight, const at::Tensor& table_rows, const at::Tensor& indices,
                        const at::Tensor& offsets, const at::Tensor& psw, int mode) {
  auto node = NodeMaker<NodePtr>::make<T>();
  node->set_next_edges(torch::autograd::collect_next_edges(weight));
  node->table_rows = torch::autograd::SavedVariable(table_rows, false);
  node->indices = torch::autograd::SavedVariable(indices, false);
  node->offsets = torch::autograd::SavedVariable(offsets, false);
  node->per_sample_weights = torch::autograd::SavedVariable(psw, false);
  node->mode = mode;
  return node;
}

void attach_table_batched_update(const at::Tensor& out, const at::Tensor& weight, const at::Tensor& table_rows,
                                 const at::Tensor& indices, const at::Tensor& offsets, const at::Tensor& psw,
                                 int mode, PyObject* update) {
  auto node = table_batched_node<TableBatchedUpdate>(weight, table_rows, indices, offsets, psw, mode);
  node->weight = torch::autograd::SavedVariable(weight, false);
  Py_INCREF(update);
  node->update = update;
  torch::autograd::set_history(out, node);
}

void attach_table_batched_backward(const at::Tensor& out, const at::Tensor& weight, const at::Tensor& table_rows,
                                   const at::Tensor& indices, const at::Tensor& offsets, const at::Tensor& psw,
                                   int mode) {
  auto node = table_batched_node<TableBatchedBackward>(weight, table_rows, indices, offsets, psw, mode);
  node->num_weights = weight.size(0);
  torch::autograd::set_history(out, node);
}

void attach_backward(const at::Tensor& out, const at::Tensor& weight, const at::Tensor& indices,
                     const at::Tensor& offsets, const at::Tensor& psw, const at::Tensor& argmax, int mode,
                     int64_t padding_idx, bool include_last_offset) {
  auto node = NodeMaker<NodePtr>::make<BagBackward>();
  node->set_next_edges(torch::autograd::collect_next_edges(weight, psw));
  node->psw_needs_grad = psw.defined() && psw.requires_grad();
  node->weight = torch::autograd::SavedVariable(node->psw_needs_grad ? weight : at::Tensor(), false);
  node->indices = torch::autograd::SavedVariable(indices, false);
  node->offsets = torch::autograd::SavedVariable(offsets, false);
  node->per_sample_weights = torch::autograd::SavedVariable(psw, false);
  node->argmax = torch::autograd::SavedVariable(argmax, false);
  node->mode = mode;
  node->padding_idx = padding_idx;
  node->num_weights = weight.size(0);
  node->include_last_offset = include_last_offset;
  torch::autograd::set_history(out, node);
}

// The usual call's tensors and scalars, as read_call found them.
struct Call {
  const at::Tensor* input = nullptr;
  const at::Tensor* weight = nullptr;
  const at::Tensor* offsets = nullptr;  // nullptr: the fixed [B, L] layout
  const at::Tensor* psw = nullptr;      // per-sample weights, or nullptr
  int mode = 0;                         // 0 sum, 1 mean, 2 max
  bool last = false;                    // include_last_offset
  int64_t device = 0, num_bags = 0, bag_size = 0, offsets_numel = 0, num_rows = 0, dim = 0, pad = -1;
};

// The arguments of embedding_bag, tested: false where the call is not the usual one (the Python
// path then validates it, and raises where it must).
bool read_call(PyObject* const* args, Call& c) {
  PyObject *input_obj = args[0], *weight_obj = args[1], *offsets_obj = args[2], *psw_obj = args[7];
  if (state.launch == nullptr || args[3] != Py_None || args[4] != Py_False || !plain_tensor(input_obj) ||
      !plain_tensor(weight_obj) || (offsets_obj != Py_None && !plain_tensor(offsets_obj)) ||
      (psw_obj != Py_None && !plain_tensor(psw_obj)) || (args[8] != Py_True && args[8] != Py_False)) {
    return false;
  }
  c.mode = mode_code(args[5]);
  if (c.mode < 0 || (c.mode == 2 && args[6] != Py_False) || (psw_obj != Py_None && c.mode != 0)) return false;
  const at::Tensor& weight = THPVariable_Unpack(weight_obj);
  const at::Tensor& input = THPVariable_Unpack(input_obj);
  c.weight = &weight;
  c.input = &input;
  if (weight.dim() != 2 || !weight.is_contiguous()) return false;
  const auto wtype = weight.scalar_type();
  if (wtype != at::kFloat && wtype != at::kHalf && wtype != at::kBFloat16) return false;
  const auto itype = input.scalar_type();
  if ((itype != at::kInt && itype != at::kLong) || !input.is_contiguous()) return false;
  c.device = cuda_index(weight);  // -1: not a CUDA tensor
  if (c.device < 0 || c.device >= kMaxDevices || cuda_index(input) != c.device) return false;
  c.last = args[8] == Py_True;
  if (offsets_obj == Py_None) {
    if (input.dim() != 2) return false;
    c.num_bags = input.size(0);
    c.bag_size = input.size(1);
  } else {
    const at::Tensor& offsets = THPVariable_Unpack(offsets_obj);
    if (input.dim() != 1 || offsets.dim() != 1 || offsets.scalar_type() != itype || !offsets.is_contiguous() ||
        cuda_index(offsets) != c.device) {
      return false;
    }
    c.offsets = &offsets;
    c.offsets_numel = offsets.numel();
    if (c.last && c.offsets_numel == 0) return false;
    c.num_bags = c.offsets_numel - (c.last ? 1 : 0);
  }
  if (psw_obj != Py_None) {
    const at::Tensor& psw = THPVariable_Unpack(psw_obj);
    if (psw.scalar_type() != wtype || !psw.is_contiguous() || cuda_index(psw) != c.device ||
        psw.sizes() != input.sizes()) {
      return false;
    }
    c.psw = &psw;
  }
  c.num_rows = weight.size(0);
  c.dim = weight.size(1);
  if (args[9] != Py_None) {
    if (!PyLong_Check(args[9])) return false;
    int overflow = 0;
    const long long p = PyLong_AsLongLongAndOverflow(args[9], &overflow);
    if (overflow != 0 || p < -c.num_rows || p >= c.num_rows) return false;
    c.pad = p < 0 ? p + c.num_rows : p;
  }
  return c.num_bags > 0 && c.dim > 0;
}

// 1: functorch transforms are active (they wrap tensors: the Python path's autograd.Function);
// 0: not; -1: a Python error is set.
int transforms_active() {
  PyObject* active = PyObject_CallNoArgs(state.transforms_active);
  if (active == nullptr) return -1;
  const int result = active != Py_False ? 1 : 0;
  Py_DECREF(active);
  return result;
}

// Whether a call with check code ``check`` on ``device`` may be served, and its ledger when it
// checks: 1 served; 0 the Python path's (sync mode, an earlier failed check to report first, no
// ledger yet, another current device); -1 a Python error is set.
int serve_on(int64_t device, int check, const int64_t** ledger) {
  *ledger = nullptr;
  if (check < 0 || check == 3) return 0;
  if (state.flags != nullptr && state.flags[device] != 0) return 0;  // an earlier check failed
  if (check > 0) {
    *ledger = state.ledgers[device][check - 1];
    if ((*ledger)[0] == 0) return 0;  // the Python path makes the ledger
  }
  bool ok = true;
  const int64_t current = call_int(state.current_device, nullptr, &ok);
  if (!ok) return -1;
  if (current != device) return 0;  // the Python path launches under a device guard
  follow_knobs();
  return 1;
}

// The device's current stream (false: a Python error is set).
bool current_stream(int64_t device, int64_t* stream) {
  PyObject* device_obj = PyLong_FromLongLong(device);
  if (device_obj == nullptr) return false;
  bool ok = true;
  *stream = call_int(state.raw_stream, device_obj, &ok);
  Py_DECREF(device_obj);
  return ok;
}

// The next check token (index_check._TOKENS; false: a Python error is set).
bool next_token(int64_t* token) {
  PyObject* token_obj = PyIter_Next(state.tokens);
  if (token_obj == nullptr) return false;
  *token = PyLong_AsLongLong(token_obj);
  Py_DECREF(token_obj);
  return !(*token == -1 && PyErr_Occurred());
}

// Whether a gradient may flow from the call (the weight's or the per-sample weights').
bool wants_gradient(const Call& c) {
  return c10::GradMode::is_enabled() && (c.weight->requires_grad() || (c.psw && c.psw->requires_grad()));
}

// A call with a gradient under functorch transforms takes the Python path's Function: 1 served,
// 0 the Python path's, -1 a Python error is set.
int serve_gradient(bool grad) {
  if (!grad) return 1;
  const int transformed = transforms_active();
  return transformed < 0 ? -1 : transformed == 0;
}

// The check pass's copy dtype: int32 where every position and valid row fits it (as run_check).
at::ScalarType clean_type_of(int64_t num_indices, int64_t rows, at::ScalarType index_type) {
  return num_indices <= kInt32Limit && rows <= kInt32Limit + 1 ? at::kInt : index_type;
}

// The kernel argument values every lookup of a call shares (the sources of host.SOURCES).
void call_values(const Call& c, int64_t weight_ptr, int64_t out_ptr, int64_t* values) {
  values[kWeight] = weight_ptr;
  values[kIndices] = reinterpret_cast<int64_t>(c.input->data_ptr());
  values[kOffsets] = c.offsets ? reinterpret_cast<int64_t>(c.offsets->data_ptr()) : 0;
  values[kOffsetsNumel] = c.offsets_numel;
  values[kPerSampleWeights] = c.psw ? reinterpret_cast<int64_t>(c.psw->data_ptr()) : 0;
  values[kPadding] = c.pad;
  values[kOut] = out_ptr;
}

// The clean copies of a check pass: with a gradient, tensors of their own (the backward keeps
// them); without, one allocation for both (freed after the launches, which the stream orders),
// the offsets' copy 16-byte aligned after the indices'.
struct CleanCopies {
  at::Tensor indices, offsets;  // offsets: defined with a gradient only
  int64_t indices_ptr = 0, offsets_ptr = 0;
};

CleanCopies clean_copies(const Call& c, at::ScalarType type, bool grad) {
  CleanCopies copies;
  const auto options = c.input->options().dtype(type);
  if (grad) {
    copies.indices = at::empty_like(*c.input, options);
    if (c.offsets != nullptr) copies.offsets = at::empty_like(*c.offsets, options);
    copies.indices_ptr = reinterpret_cast<int64_t>(copies.indices.data_ptr());
    copies.offsets_ptr = copies.offsets.defined() ? reinterpret_cast<int64_t>(copies.offsets.data_ptr()) : 0;
    return copies;
  }
  const int64_t per_16_bytes = 16 / at::elementSize(type);
  const int64_t head = (c.input->numel() + per_16_bytes - 1) / per_16_bytes * per_16_bytes;
  copies.indices = at::empty({head + c.offsets_numel}, options);
  copies.indices_ptr = reinterpret_cast<int64_t>(copies.indices.data_ptr());
  if (c.offsets != nullptr) copies.offsets_ptr = copies.indices_ptr + head * at::elementSize(type);
  return copies;
}

// The plans of a call: its lookup, and the check pass's kernel when the lookup cannot check (its
// registered plan's function is 0) or the call has a gradient. nullptr lookup: not served (a miss
// asks the Python path to register what it uses).
struct Plans {
  const Entry* lookup = nullptr;
  const CheckEntry* pass = nullptr;
  at::ScalarType clean_type = at::kInt;
};

Plans find_plans(const Key& key, const Call& c, int check, bool grad) {
  Plans plans;
  bool use_pass = check > 0 && grad;  // the backward reads the pass's clean copies, as on the Python path
  if (!use_pass) {
    plans.lookup = find_plan(key);
    if (plans.lookup == nullptr) return plans;
    use_pass = plans.lookup->function == 0;
  }
  if (!use_pass) return plans;
  const at::ScalarType itype = c.input->scalar_type();
  plans.clean_type = clean_type_of(c.input->numel(), c.num_rows, itype);
  plans.pass = find_check(c.device, itype, plans.clean_type, 0);
  Key clean_key = key;
  clean_key.index_dtype = scalar_code(plans.clean_type);
  clean_key.checked = 0;
  plans.lookup = plans.pass == nullptr ? nullptr : find_plan(clean_key);
  if (plans.lookup != nullptr && plans.lookup->function == 0) plans.lookup = nullptr;
  return plans;
}

// bag(input, weight, offsets, max_norm, scale_grad_by_freq, mode, sparse, per_sample_weights,
//     include_last_offset, padding_idx, check_indices) -> Tensor, or None: not served here.
PyObject* bag(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 11) {
    PyErr_SetString(PyExc_TypeError, "bag takes 11 positional arguments");
    return nullptr;
  }
  state.pending = false;  // set again below if this call misses a registered plan
  Call c;
  if (!read_call(args, c)) return not_served();
  const at::Tensor &weight = *c.weight, &input = *c.input;
  const bool grad = wants_gradient(c);
  if (grad && args[6] != Py_False) return not_served();  // sparse=True: the Python path's sparse gradient
  const int gradient = serve_gradient(grad);
  if (gradient <= 0) return gradient < 0 ? nullptr : not_served();
  const bool need_argmax = grad && c.mode == 2 && weight.requires_grad();
  const int check = check_code(args[10]);
  if (check > 0 && c.num_rows == 0) return not_served();
  const int64_t* ledger = nullptr;
  const int served = serve_on(c.device, check, &ledger);
  if (served <= 0) return served < 0 ? nullptr : not_served();
  const int64_t weight_ptr = reinterpret_cast<int64_t>(weight.data_ptr());
  // The key of an aligned output (torch's CUDA allocator hands out blocks aligned far beyond 16
  // bytes; checked below). A call with a gradient checks in the pass: its key is the unchecked one.
  const Key key{scalar_code(weight.scalar_type()), c.num_rows, c.dim, weight_ptr % 16, 1,
                scalar_code(input.scalar_type()), c.bag_size, input.numel(), c.num_bags, 1, 0, c.mode,
                c.psw != nullptr, need_argmax, c.pad >= 0, check > 0 && !grad, c.device};
  const Plans plans = find_plans(key, c, check, grad);
  if (plans.lookup == nullptr) return not_served();
  const bool poison = poison_outputs();
  at::Tensor out = at::empty({c.num_bags, c.dim}, weight.options());
  const int64_t out_ptr = reinterpret_cast<int64_t>(out.data_ptr());
  if (out_ptr % 16 != 0) return not_served();
  int64_t stream = 0;
  if (!current_stream(c.device, &stream)) return nullptr;
  int64_t values[kSources] = {};
  call_values(c, weight_ptr, out_ptr, values);
  at::Tensor argmax;
  if (need_argmax) {
    argmax = at::empty({c.num_bags, c.dim}, weight.options().dtype(at::kLong));
    values[kArgmax] = reinterpret_cast<int64_t>(argmax.data_ptr());
  }
  CleanCopies clean;
  if (ledger != nullptr) {
    int64_t token = 0;
    if (!next_token(&token)) return nullptr;
    if (plans.pass == nullptr) {  // the lookup checks its own indices (CHECK)
      static_assert(kRecord == kLock + 1 && kFlag == kLock + 2 && kToken == kLock + 3 && kOp == kLock + 4 &&
                    kNumRows == kLock + 5, "the ledger's sources in the kernel's parameter order");
      const int64_t checked[6] = {ledger[0], ledger[1], ledger[2], token, kOpEmbeddingBag, c.num_rows};
      std::memcpy(values + kLock, checked, sizeof(checked));  // kLock .. kNumRows, in that order
    } else {
      clean = clean_copies(c, plans.clean_type, grad);
      if (!launch_check(*plans.pass, values[kIndices], input.numel(), c.num_rows, values[kOffsets], c.offsets_numel,
                        clean.indices_ptr, clean.offsets_ptr, ledger, token, PassTables{}, stream)) {
        return nullptr;
      }
      values[kIndices] = clean.indices_ptr;
      values[kOffsets] = clean.offsets_ptr;
    }
  }
  if (poison) out.fill_(std::nan(""));
  if (!launch_entry(*plans.lookup, values, stream)) return nullptr;
  if (grad) {
    const at::Tensor none;
    attach_backward(out, weight, clean.indices.defined() ? clean.indices : input,
                    clean.offsets.defined() ? clean.offsets : (c.offsets ? *c.offsets : none), c.psw ? *c.psw : none,
                    argmax, c.mode, c.pad, c.last);
  }
  ++state.served;
  return THPVariable_Wrap(std::move(out));
  END_HANDLE_TH_ERRORS
}

// A table-batched call's tables: the first row of each in the weight, their sizes (the check's),
// and the largest size (the check's copy dtype and its bound, as the module's max_rows).
struct Tables {
  const at::Tensor* rows = nullptr;
  const at::Tensor* sizes = nullptr;
  int64_t count = 0, max_rows = 0;
};

// A tensor of one dimension, contiguous, of ``type``, on ``device``.
bool vector_of(const at::Tensor& t, at::ScalarType type, int64_t device) {
  return t.dim() == 1 && t.scalar_type() == type && t.is_contiguous() && cuda_index(t) == device;
}

// The arguments of TableBatchedEmbeddingBag.forward (and the module's state), tested as read_call
// tests embedding_bag's: false where the call is not the usual one.
bool read_table_batched_call(PyObject* const* args, Call& c, Tables& t) {
  PyObject *weight_obj = args[0], *rows_obj = args[1], *sizes_obj = args[2], *input_obj = args[3],
           *offsets_obj = args[4], *psw_obj = args[5];
  if (state.launch == nullptr || !plain_tensor(weight_obj) || !plain_tensor(rows_obj) || !plain_tensor(sizes_obj) ||
      !plain_tensor(input_obj) || !plain_tensor(offsets_obj) || (psw_obj != Py_None && !plain_tensor(psw_obj)) ||
      !PyLong_Check(args[8])) {
    return false;
  }
  c.mode = mode_code(args[6]);
  if (c.mode < 0 || (psw_obj != Py_None && c.mode != 0)) return false;
  const at::Tensor& weight = THPVariable_Unpack(weight_obj);
  const at::Tensor& input = THPVariable_Unpack(input_obj);
  const at::Tensor& offsets = THPVariable_Unpack(offsets_obj);
  const at::Tensor& rows = THPVariable_Unpack(rows_obj);
  const at::Tensor& sizes = THPVariable_Unpack(sizes_obj);
  c.weight = &weight;
  c.input = &input;
  c.offsets = &offsets;
  t.rows = &rows;
  t.sizes = &sizes;
  if (weight.dim() != 2 || !weight.is_contiguous()) return false;
  const auto wtype = weight.scalar_type();
  if (wtype != at::kFloat && wtype != at::kHalf && wtype != at::kBFloat16) return false;
  c.device = cuda_index(weight);
  const auto itype = input.scalar_type();
  if (c.device < 0 || c.device >= kMaxDevices || (itype != at::kInt && itype != at::kLong) ||
      !vector_of(input, itype, c.device) || !vector_of(offsets, itype, c.device) ||
      !vector_of(rows, at::kLong, c.device) || !vector_of(sizes, at::kLong, c.device)) {
    return false;
  }
  t.count = rows.numel();
  c.offsets_numel = offsets.numel();
  if (t.count == 0 || sizes.numel() != t.count || c.offsets_numel < 1 || (c.offsets_numel - 1) % t.count != 0) {
    return false;
  }
  if (psw_obj != Py_None) {
    const at::Tensor& psw = THPVariable_Unpack(psw_obj);
    if (!vector_of(psw, wtype, c.device) || psw.numel() != input.numel()) return false;
    c.psw = &psw;
  }
  int overflow = 0;
  t.max_rows = PyLong_AsLongLongAndOverflow(args[8], &overflow);
  if (overflow != 0 || t.max_rows < 1) return false;
  c.last = true;
  c.num_bags = c.offsets_numel - 1;
  c.num_rows = weight.size(0);
  c.dim = weight.size(1);
  return c.num_bags > 0 && c.dim > 0;
}

// tbe(weight, table_rows, table_sizes, indices, offsets, per_sample_weights, mode, check_indices,
//     max_rows, update) -> Tensor, or None: not served here. update: False for the op's gradient;
// else the module has a sparse gradient (True) or a fused optimizer (its state), and a call with a
// gradient gets the module's own backward (TableBatchedUpdate), which gives the per-sample weights
// no gradient: a call whose per-sample weights want one takes the Python path.
PyObject* tbe(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 10) {
    PyErr_SetString(PyExc_TypeError, "tbe takes 10 positional arguments");
    return nullptr;
  }
  state.pending = false;  // set again below if this call misses a registered plan
  Call c;
  Tables t;
  if (!read_table_batched_call(args, c, t)) return not_served();
  const at::Tensor &weight = *c.weight, &input = *c.input;
  const bool grad = wants_gradient(c);
  PyObject* update = args[9];
  const bool own_backward = update != Py_False;
  // a gradient for the per-sample weights alone, or for them beside the module's own backward: the Python path
  if (grad && (!weight.requires_grad() || (own_backward && c.psw && c.psw->requires_grad()))) return not_served();
  const int gradient = serve_gradient(grad);
  if (gradient <= 0) return gradient < 0 ? nullptr : not_served();
  const int check = check_code(args[7]);
  const int64_t* ledger = nullptr;
  const int served = serve_on(c.device, check, &ledger);
  if (served <= 0) return served < 0 ? nullptr : not_served();
  // the check pass (the lookup reads its copies), then the unchecked lookup, as check_tables runs them
  const at::ScalarType itype = input.scalar_type();
  at::ScalarType lookup_type = itype;
  const CheckEntry* pass = nullptr;
  if (check > 0) {
    const int64_t cap = table_cap(t.count);
    if (cap < 0) return not_served();  // spans from torch: the Python path
    lookup_type = clean_type_of(input.numel(), t.max_rows, itype);
    pass = find_check(c.device, itype, lookup_type, cap);
    if (pass == nullptr) return not_served();
  }
  const int64_t weight_ptr = reinterpret_cast<int64_t>(weight.data_ptr());
  const Key key{scalar_code(weight.scalar_type()), c.num_rows, c.dim, weight_ptr % 16, 1, scalar_code(lookup_type), 0,
                input.numel(), c.num_bags, t.count, 1, c.mode, c.psw != nullptr, 0, 0, 0, c.device};
  const Entry* lookup = find_plan(key);
  if (lookup == nullptr || lookup->function == 0) return not_served();
  const bool poison = poison_outputs();
  at::Tensor out = at::empty({c.num_bags / t.count, t.count * c.dim}, weight.options());
  const int64_t out_ptr = reinterpret_cast<int64_t>(out.data_ptr());
  if (out_ptr % 16 != 0) return not_served();
  int64_t stream = 0;
  if (!current_stream(c.device, &stream)) return nullptr;
  int64_t values[kSources] = {};
  call_values(c, weight_ptr, out_ptr, values);  // padding -1: the module has no padding row
  values[kTableRows] = reinterpret_cast<int64_t>(t.rows->data_ptr());
  CleanCopies clean;
  if (pass != nullptr) {
    int64_t token = 0;
    if (!next_token(&token)) return nullptr;
    clean = clean_copies(c, lookup_type, grad);
    const PassTables tables{reinterpret_cast<int64_t>(t.sizes->data_ptr()), t.count, c.num_bags / t.count,
                            kOpTableBatched};
    if (!launch_check(*pass, values[kIndices], input.numel(), t.max_rows, values[kOffsets], c.offsets_numel,
                      clean.indices_ptr, clean.offsets_ptr, ledger, token, tables, stream)) {
      return nullptr;
    }
    values[kIndices] = clean.indices_ptr;
    values[kOffsets] = clean.offsets_ptr;
  }
  if (poison) out.fill_(std::nan(""));
  if (!launch_entry(*lookup, values, stream)) return nullptr;
  if (grad) {
    const at::Tensor& saved_indices = clean.indices.defined() ? clean.indices : input;
    const at::Tensor& saved_offsets = clean.offsets.defined() ? clean.offsets : *c.offsets;
    const at::Tensor saved_psw = c.psw ? *c.psw : at::Tensor();
    if (own_backward) {
      attach_table_batched_update(out, weight, *t.rows, saved_indices, saved_offsets, saved_psw, c.mode, update);
    } else {
      attach_table_batched_backward(out, weight, *t.rows, saved_indices, saved_offsets, saved_psw, c.mode);
    }
  }
  ++state.served;
  return THPVariable_Wrap(std::move(out));
  END_HANDLE_TH_ERRORS
}

bool as_int64(PyObject* obj, int64_t* out) {
  *out = PyLong_AsLongLong(obj);
  return !(*out == -1 && PyErr_Occurred());
}

// offer(key, device, function, grid, block, kinds, slots): register the Python path's plan for
// the call that last missed. key: BagKey's fields as a tuple of ints (dtypes as torch.dtype);
// kinds: the struct codes of the parameters; slots: per parameter (source, constant).
PyObject* offer(PyObject*, PyObject* args) {
  PyObject *key_obj, *kinds_obj, *slots_obj;
  long long device, function;
  unsigned int grid, block;
  if (!PyArg_ParseTuple(args, "OLLIIUO", &key_obj, &device, &function, &grid, &block, &kinds_obj, &slots_obj)) {
    return nullptr;
  }
  if (!PyTuple_Check(key_obj) || PyTuple_GET_SIZE(key_obj) != 16 || !PyTuple_Check(slots_obj)) {
    PyErr_SetString(PyExc_TypeError, "offer: key must be BagKey's 16 fields, slots a tuple");
    return nullptr;
  }
  follow_knobs();
  const char* kinds = PyUnicode_AsUTF8(kinds_obj);
  if (kinds == nullptr) return nullptr;
  const Py_ssize_t count = static_cast<Py_ssize_t>(std::strlen(kinds));
  if (count != PyTuple_GET_SIZE(slots_obj)) {
    PyErr_SetString(PyExc_ValueError, "offer: one slot per parameter kind");
    return nullptr;
  }
  Entry entry{static_cast<uintptr_t>(function), grid, block, 0, {}};
  int offset = 0;
  for (Py_ssize_t i = 0; i < count; ++i) {
    const char kind = kinds[i];
    const int size = (kind == 'P' || kind == 'q') ? 8 : 4;
    offset = (offset + size - 1) / size * size;
    PyObject* slot_obj = PyTuple_GET_ITEM(slots_obj, i);
    long long source = 0;
    PyObject* constant = nullptr;
    if (!PyArg_ParseTuple(slot_obj, "LO", &source, &constant)) return nullptr;
    Slot slot{offset, size, kind == 'f', static_cast<int>(source), 0, 0.0};
    if (source < 0 || source >= kSources || (slot.is_float && source != kConstant)) {
      PyErr_SetString(PyExc_ValueError, "offer: a slot's source is out of range");
      return nullptr;
    }
    if (source == kConstant) {
      if (slot.is_float) {
        slot.constant_f = PyFloat_AsDouble(constant);
        if (PyErr_Occurred()) return nullptr;
      } else if (!as_int64(constant, &slot.constant)) {
        return nullptr;
      }
    }
    entry.slots.push_back(slot);
    offset += size;
  }
  if (offset > kMaxParamBytes) {
    PyErr_SetString(PyExc_ValueError, "offer: the parameters exceed 512 bytes");
    return nullptr;
  }
  entry.param_bytes = static_cast<size_t>(offset);
  int64_t fields[16];
  for (int i = 0; i < 16; ++i) {
    PyObject* field = PyTuple_GET_ITEM(key_obj, i);
    if (THPDtype_Check(field)) {
      fields[i] = scalar_code(reinterpret_cast<THPDtype*>(field)->scalar_type);
    } else if (PyUnicode_Check(field)) {
      fields[i] = mode_code(field);
    } else if (!as_int64(field, &fields[i])) {
      return nullptr;
    }
  }
  // BagKey: dtype, num_rows, dim, weight_align, out_aligned, index_dtype, bag_size, num_indices, num_bags,
  //         tables, table_batched, mode, has_psw, need_argmax, has_padding, checked
  if (fields[11] < 0) Py_RETURN_FALSE;  // not a mode the library knows
  const Key key{fields[0], fields[1], fields[2], fields[3], fields[4], fields[5], fields[6], fields[7], fields[8],
                fields[9], fields[10], fields[11], fields[12], fields[13], fields[14], fields[15], device};
  if (state.plans.size() >= kMaxPlans) state.plans.clear();
  state.plans[key] = std::move(entry);
  Py_RETURN_TRUE;
}

// offer_check(device, index dtype, clean dtype, function, block, max_blocks[, table cap]): the check
// pass's kernel (table cap 0: one table's; else a table-batched call's TABLE_CAP variant).
PyObject* offer_check(PyObject*, PyObject* args) {
  long long device, function, cap = 0;
  PyObject *index_obj, *clean_obj;
  unsigned int block, max_blocks;
  if (!PyArg_ParseTuple(args, "LOOLII|L", &device, &index_obj, &clean_obj, &function, &block, &max_blocks, &cap)) {
    return nullptr;
  }
  if (!THPDtype_Check(index_obj) || !THPDtype_Check(clean_obj) || block == 0 || max_blocks == 0) {
    PyErr_SetString(PyExc_TypeError, "offer_check: dtypes must be torch.dtype, block and max_blocks positive");
    return nullptr;
  }
  if (cap != 0 && table_cap(cap - 1) != cap) {
    PyErr_SetString(PyExc_ValueError, "offer_check: the table cap must be 0 or one of index_check.TABLE_CAPS");
    return nullptr;
  }
  follow_knobs();
  state.checks[check_key(device, reinterpret_cast<THPDtype*>(index_obj)->scalar_type,
                         reinterpret_cast<THPDtype*>(clean_obj)->scalar_type, cap)] = {
      static_cast<uintptr_t>(function), block, max_blocks};
  Py_RETURN_NONE;
}

PyObject* pending(PyObject*, PyObject*) { return PyBool_FromLong(state.pending); }

PyObject* clear(PyObject*, PyObject*) {
  state.plans.clear();
  state.checks.clear();
  state.pending = false;
  Py_RETURN_NONE;
}

PyObject* plan_count(PyObject*, PyObject*) { return PyLong_FromSize_t(state.plans.size()); }

// For tests without a GPU: CPU tensors count as device 0 (the launcher given to init is then a stand-in).
PyObject* cpu_as_device0(PyObject*, PyObject* flag) {
  const int truth = PyObject_IsTrue(flag);
  if (truth < 0) return nullptr;
  state.cpu_as_device0 = truth == 1;
  Py_RETURN_NONE;
}

PyObject* served_count(PyObject*, PyObject*) { return PyLong_FromUnsignedLongLong(state.served); }

// set_launch_ex(address): cuLaunchKernelEx's address, every launch from then on programmatic; 0: plain
// cuLaunchKernel again. Returns whether launches were programmatic before.
PyObject* set_launch_ex(PyObject*, PyObject* address) {
  const unsigned long long value = PyLong_AsUnsignedLongLong(address);
  if (PyErr_Occurred()) return nullptr;
  const bool before = state.launch_ex != nullptr;
  state.launch_ex = reinterpret_cast<LaunchExFn>(value);
  return PyBool_FromLong(before);
}

// set_ledger(device, flags_address, deferred (lock, record, flag), warn (lock, record, flag))
PyObject* set_ledger(PyObject*, PyObject* args) {
  long long device, flags, dl, dr, df, wl, wr, wf;
  if (!PyArg_ParseTuple(args, "LL(LLL)(LLL)", &device, &flags, &dl, &dr, &df, &wl, &wr, &wf)) return nullptr;
  if (device < 0 || device >= kMaxDevices) {
    PyErr_SetString(PyExc_ValueError, "set_ledger: device out of range");
    return nullptr;
  }
  state.flags = reinterpret_cast<const int64_t*>(flags);
  const long long words[2][3] = {{dl, dr, df}, {wl, wr, wf}};
  for (int m = 0; m < kCheckModes; ++m) {
    for (int w = 0; w < 3; ++w) state.ledgers[device][m][w] = words[m][w];
  }
  Py_RETURN_NONE;
}

PyObject* keep(PyObject* obj) {
  Py_INCREF(obj);
  return obj;
}

// init(launch_address, current_device, raw_stream, check_modes, tokens, tuning_module, on_launch_error,
//      launch_module, transforms_active, backward, tbe_backward, tbe_update)
PyObject* init(PyObject*, PyObject* args) {
  long long launch;
  PyObject *current, *stream, *mode, *tokens, *tuning, *on_error, *launch_module, *transforms, *backward, *tbe_backward,
      *tbe_update;
  if (!PyArg_ParseTuple(args, "LOOOOOOOOOOO", &launch, &current, &stream, &mode, &tokens, &tuning, &on_error,
                        &launch_module, &transforms, &backward, &tbe_backward, &tbe_update)) {
    return nullptr;
  }
  state.tbe_update = keep(tbe_update);
  state.transforms_active = keep(transforms);
  state.backward = keep(backward);
  state.tbe_backward = keep(tbe_backward);
  state.launch = reinterpret_cast<LaunchFn>(launch);
  state.current_device = keep(current);
  state.raw_stream = keep(stream);
  if (!PyTuple_Check(mode) || PyTuple_GET_SIZE(mode) != 4) {
    PyErr_SetString(PyExc_TypeError, "init: check_modes must be a tuple of the 4 CheckMode members by code");
    return nullptr;
  }
  for (int i = 0; i < 4; ++i) state.check_modes[i] = keep(PyTuple_GET_ITEM(mode, i));
  state.tokens = keep(tokens);
  state.tuning_module = keep(tuning);
  state.on_launch_error = keep(on_error);
  state.launch_module = keep(launch_module);
  state.poison_name = PyUnicode_InternFromString("POISON_OUTPUTS");
  state.knobs_name = PyUnicode_InternFromString("_CURRENT");
  const char* modes[3] = {"sum", "mean", "max"};
  for (int i = 0; i < 3; ++i) state.mode_names[i] = PyUnicode_InternFromString(modes[i]);
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"bag", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(bag)), METH_FASTCALL,
     "The usual eager embedding_bag forward call, or None where the Python path must run."},
    {"tbe", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(tbe)), METH_FASTCALL,
     "The usual eager TableBatchedEmbeddingBag forward call, or None where the Python path must run."},
    {"launch_raw", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(launch_raw)), METH_FASTCALL,
     "cuLaunchKernel of a kernel the Python path has packed; returns the CUresult."},
    {"offer", offer, METH_VARARGS, "Register the Python path's plan of the call that last missed."},
    {"offer_check", offer_check, METH_VARARGS, "Register the check pass's kernel of one dtype pair."},
    {"pending", pending, METH_NOARGS, "Whether a call missed since the last offer."},
    {"clear", clear, METH_NOARGS, "Forget every registered plan."},
    {"plan_count", plan_count, METH_NOARGS, "How many plans are registered."},
    {"cpu_as_device0", cpu_as_device0, METH_O, "Tests without a GPU: CPU tensors as device 0."},
    {"served_count", served_count, METH_NOARGS, "How many calls this library launched."},
    {"set_launch_ex", set_launch_ex, METH_O, "cuLaunchKernelEx's address: programmatic launches (0: off)."},
    {"set_ledger", set_ledger, METH_VARARGS, "The index check's ledger pointers of one device."},
    {"init", init, METH_VARARGS, "Bind the launch entry point and the Python callbacks."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_reference_kernels_host", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__reference_kernels_host() { return PyModule_Create(&module_def); }
