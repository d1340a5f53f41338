#include "chorus/server/frontends/http/kserve_json.h"

#include <algorithm>

#include <google/protobuf/util/json_util.h>

#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <type_traits>
#include <variant>

#include "chorus/package/dtype.h"
#include "chorus/server/config/triton_config.h"
#include "chorus/server/models/infer_parameters.h"
#include "chorus/server/models/wire_tensors.h"

namespace chorus {
namespace {

using Json = nlohmann::json;

Status Invalid(const std::string& input, const std::string& what) {
  return InvalidArgumentError("input \"" + input + "\": " + what);
}

template <typename T>
void AppendBytes(T value, std::string* raw) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  raw->append(bytes, sizeof(T));
}

template <typename T>
T ReadBytes(const std::string& raw, size_t index) {
  T value;
  std::memcpy(&value, raw.data() + index * sizeof(T), sizeof(T));
  return value;
}

// Whether the JSON integer `value` fits `T`.
template <typename T>
bool Fits(const Json& value) {
  if (value.is_number_unsigned()) {
    return value.get<uint64_t>() <= uint64_t{std::numeric_limits<T>::max()};
  }
  const int64_t number = value.get<int64_t>();
  if constexpr (std::is_unsigned_v<T>) {
    return number >= 0 && static_cast<uint64_t>(number) <= std::numeric_limits<T>::max();
  } else {
    return number >= std::numeric_limits<T>::min() && number <= std::numeric_limits<T>::max();
  }
}

template <typename T>
Status AppendInteger(const Json& value, const std::string& input, int64_t index, std::string* raw) {
  const std::string what = "value " + std::to_string(index) + " (" + value.dump() + ")";
  if (!value.is_number_integer()) return Invalid(input, what + " is not an integer");
  if (!Fits<T>(value)) return Invalid(input, what + " does not fit its datatype");
  AppendBytes(value.is_number_unsigned() ? static_cast<T>(value.get<uint64_t>())
                                         : static_cast<T>(value.get<int64_t>()),
              raw);
  return OkStatus();
}

// One JSON value as an element of `dtype`, appended to `raw` (strings in
// BYTES' raw layout: their length, then their bytes).
Status AppendValue(const Json& value, Dtype dtype, const std::string& input, int64_t index,
                   std::string* raw) {
  if (dtype == Dtype::kString) {
    if (!value.is_string()) {
      return Invalid(input,
                     "value " + std::to_string(index) + " (" + value.dump() + ") is not a string");
    }
    *raw += StringsToRaw({value.get<std::string>()});
    return OkStatus();
  }
  if (dtype == Dtype::kBool) {
    if (!value.is_boolean()) {
      return Invalid(input,
                     "value " + std::to_string(index) + " (" + value.dump() + ") is not a boolean");
    }
    raw->push_back(value.get<bool>() ? 1 : 0);
    return OkStatus();
  }
  switch (dtype) {
    case Dtype::kUint8:
      return AppendInteger<uint8_t>(value, input, index, raw);
    case Dtype::kInt8:
      return AppendInteger<int8_t>(value, input, index, raw);
    case Dtype::kInt16:
      return AppendInteger<int16_t>(value, input, index, raw);
    case Dtype::kInt32:
      return AppendInteger<int32_t>(value, input, index, raw);
    case Dtype::kInt64:
      return AppendInteger<int64_t>(value, input, index, raw);
    case Dtype::kUint16:
      return AppendInteger<uint16_t>(value, input, index, raw);
    case Dtype::kUint32:
      return AppendInteger<uint32_t>(value, input, index, raw);
    case Dtype::kUint64:
      return AppendInteger<uint64_t>(value, input, index, raw);
    default:
      break;
  }
  if (!value.is_number()) {
    return Invalid(input,
                   "value " + std::to_string(index) + " (" + value.dump() + ") is not a number");
  }
  const double number = value.get<double>();
  switch (dtype) {
    case Dtype::kFloat16:
      AppendBytes(HalfFromFloat(static_cast<float>(number)), raw);
      break;
    case Dtype::kBFloat16:
      AppendBytes(BFloat16FromFloat(static_cast<float>(number)), raw);
      break;
    case Dtype::kFloat32:
      AppendBytes(static_cast<float>(number), raw);
      break;
    default:
      AppendBytes(number, raw);
      break;
  }
  return OkStatus();
}

// "data" (flat or nested arrays, row-major) appended to `raw`; `count` counts.
Status AppendValues(const Json& data, Dtype dtype, const std::string& input, std::string* raw,
                    int64_t* count) {
  if (!data.is_array()) {
    CHORUS_RETURN_IF_ERROR(AppendValue(data, dtype, input, *count, raw));
    ++*count;
    return OkStatus();
  }
  for (const Json& item : data)
    CHORUS_RETURN_IF_ERROR(AppendValues(item, dtype, input, raw, count));
  return OkStatus();
}

// Element `index` of `raw` as a JSON value.
Json ValueAt(const std::string& raw, Dtype dtype, size_t index) {
  switch (dtype) {
    case Dtype::kBool:
      return raw[index] != 0;
    case Dtype::kUint8:
      return ReadBytes<uint8_t>(raw, index);
    case Dtype::kInt8:
      return ReadBytes<int8_t>(raw, index);
    case Dtype::kInt16:
      return ReadBytes<int16_t>(raw, index);
    case Dtype::kInt32:
      return ReadBytes<int32_t>(raw, index);
    case Dtype::kInt64:
      return ReadBytes<int64_t>(raw, index);
    case Dtype::kFloat16:
      return HalfToFloat(ReadBytes<uint16_t>(raw, index));
    case Dtype::kBFloat16:
      return BFloat16ToFloat(ReadBytes<uint16_t>(raw, index));
    case Dtype::kFloat32:
      return ReadBytes<float>(raw, index);
    case Dtype::kFloat64:
      return ReadBytes<double>(raw, index);
    case Dtype::kUint16:
      return ReadBytes<uint16_t>(raw, index);
    case Dtype::kUint32:
      return ReadBytes<uint32_t>(raw, index);
    case Dtype::kUint64:
      return ReadBytes<uint64_t>(raw, index);
    case Dtype::kString:
      break;  // variable-size: see DataJson
  }
  return nullptr;
}

// An output's raw contents as a flat JSON array.
Json DataJson(const inference::ModelInferResponse::InferOutputTensor& tensor,
              const std::string& raw) {
  const DtypeInfo* dtype = DtypeByWireName(tensor.datatype());
  Json data = Json::array();
  if (dtype == nullptr) return data;
  if (dtype->dtype == Dtype::kString) {
    // Encoded by chorus itself, so well-formed.
    StatusOr<StringTensor> strings = StringTensorFromRaw(
        std::vector<int64_t>(tensor.shape().begin(), tensor.shape().end()), raw);
    if (strings.ok()) {
      for (std::string& element : strings->elements) data.push_back(std::move(element));
    }
    return data;
  }
  const size_t n = raw.size() / dtype->element_size;
  for (size_t e = 0; e < n; ++e) data.push_back(ValueAt(raw, dtype->dtype, e));
  return data;
}

// `doc` as text; bytes that are not UTF-8 (BYTES outputs need not be text)
// become U+FFFD rather than failing the answer.
std::string Dump(const Json& doc) {
  return doc.dump(-1, ' ', false, Json::error_handler_t::replace);
}

const Json* Member(const Json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// The request's "parameters" object into `parameters` (what the core reads:
// sampling parameters of a generate request, Triton's flags). Each value is a
// bool, an integer, a number or a string, as KServe's parameters are.
Status ReadParameters(const Json& object, InferParameters* parameters) {
  if (!object.is_object()) return InvalidArgumentError("\"parameters\" is not an object");
  for (const auto& [name, value] : object.items()) {
    inference::InferParameter& parameter = (*parameters)[name];
    if (value.is_boolean()) {
      parameter.set_bool_param(value.get<bool>());
    } else if (value.is_number_integer()) {
      parameter.set_int64_param(value.get<int64_t>());
    } else if (value.is_number()) {
      parameter.set_double_param(value.get<double>());
    } else if (value.is_string()) {
      parameter.set_string_param(value.get<std::string>());
    } else {
      return InvalidArgumentError("parameter \"" + name + "\" is not a bool, a number or a string");
    }
  }
  return OkStatus();
}

// An input's "shape" (may be null) into `tensor`, and its element count.
Status ParseShape(const Json* shape, inference::ModelInferRequest::InferInputTensor* tensor,
                  int64_t* elements) {
  const std::string& input_name = tensor->name();
  if (shape == nullptr || !shape->is_array()) return Invalid(input_name, "no \"shape\" array");
  for (const Json& d : *shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      return Invalid(input_name, "shape " + shape->dump() + " is not a list of sizes");
    }
    const int64_t size = d.get<int64_t>();
    if (size != 0 && *elements > (int64_t{1} << 56) / size) {
      return Invalid(input_name, "shape " + shape->dump() + " has too many elements");
    }
    tensor->add_shape(size);
    *elements *= size;
  }
  return OkStatus();
}

// One input's name, datatype and shape; its values go to `raw` (from "data"
// or from `binary`, which is advanced past them).
Status ParseInput(const Json& input, inference::ModelInferRequest::InferInputTensor* tensor,
                  std::string* raw, std::string_view* binary) {
  const Json* name = Member(input, "name");
  if (name == nullptr || !name->is_string()) {
    return InvalidArgumentError("an input without a \"name\" string");
  }
  tensor->set_name(name->get<std::string>());
  const std::string& input_name = tensor->name();
  const Json* datatype = Member(input, "datatype");
  if (datatype == nullptr || !datatype->is_string()) {
    return Invalid(input_name, "no \"datatype\" string");
  }
  tensor->set_datatype(datatype->get<std::string>());
  const Json* shape = Member(input, "shape");
  int64_t elements = 1;
  CHORUS_RETURN_IF_ERROR(ParseShape(shape, tensor, &elements));
  const Json* parameters = Member(input, "parameters");
  if (parameters != nullptr && parameters->is_object() &&
      Member(*parameters, "shared_memory_region") != nullptr) {
    // Its bytes are in shared memory: the core reads them there. Binary bytes
    // too would be taken by the next binary input, or left over (Triton
    // refuses such an input as well).
    if (Member(*parameters, "binary_data_size") != nullptr) {
      return Invalid(input_name,
                     "names both a shared_memory_region and a binary_data_size (its bytes come "
                     "from one or the other)");
    }
    return ReadParameters(*parameters, tensor->mutable_parameters());
  }
  const Json* binary_size = parameters != nullptr && parameters->is_object()
                                ? Member(*parameters, "binary_data_size")
                                : nullptr;
  if (binary_size != nullptr) {
    if (!binary_size->is_number_unsigned() || binary_size->get<uint64_t>() > binary->size()) {
      return Invalid(input_name, "binary_data_size " + binary_size->dump() + " exceeds the " +
                                     std::to_string(binary->size()) + " bytes of binary data left");
    }
    *raw = std::string(binary->substr(0, binary_size->get<size_t>()));
    binary->remove_prefix(binary_size->get<size_t>());
    return OkStatus();  // its size is checked against the shape by the core
  }
  const DtypeInfo* dtype = DtypeByWireName(tensor->datatype());
  if (dtype == nullptr)
    return Invalid(input_name, "unknown datatype \"" + tensor->datatype() + "\"");
  const Json* data = Member(input, "data");
  if (data == nullptr) return Invalid(input_name, "neither \"data\" nor binary_data_size");
  int64_t count = 0;
  CHORUS_RETURN_IF_ERROR(AppendValues(*data, dtype->dtype, input_name, raw, &count));
  if (count != elements) {
    return Invalid(input_name, std::to_string(count) + " values for shape " + shape->dump() + " (" +
                                   std::to_string(elements) + " elements)");
  }
  return OkStatus();
}

Json TensorMetadataJson(const inference::ModelMetadataResponse::TensorMetadata& tensor) {
  return Json{{"name", tensor.name()},
              {"datatype", tensor.datatype()},
              {"shape", std::vector<int64_t>(tensor.shape().begin(), tensor.shape().end())}};
}

// A response's parameters (a Python-backend model's), as the protocol's JSON has them.
Json ParametersJson(const InferParameters& parameters) {
  Json out = Json::object();
  for (const auto& entry : ParametersOf(parameters)) {
    const std::string& name = entry.first;  // clang's lambdas cannot capture bindings
    std::visit([&out, &name](const auto& value) { out[name] = value; }, entry.second);
  }
  return out;
}

Json DurationJson(const inference::StatisticDuration& duration) {
  return Json{{"count", duration.count()}, {"ns", duration.ns()}};
}

}  // namespace

StatusOr<inference::ModelInferRequest> ParseInferRequest(std::string_view body,
                                                         std::optional<size_t> json_length,
                                                         const std::string& model,
                                                         const std::string& version) {
  const size_t header = json_length.value_or(body.size());
  if (header > body.size()) {
    return InvalidArgumentError(std::string(kInferenceHeaderLength) + " " + std::to_string(header) +
                                " exceeds the body's " + std::to_string(body.size()) + " bytes");
  }
  Json doc = Json::parse(body.substr(0, header), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgumentError("the request body is not valid JSON");
  if (!doc.is_object()) return InvalidArgumentError("the request body is not a JSON object");
  inference::ModelInferRequest request;
  request.set_model_name(model);
  request.set_model_version(version);
  if (const Json* id = Member(doc, "id"); id != nullptr) {
    if (!id->is_string()) return InvalidArgumentError("\"id\" is not a string");
    request.set_id(id->get<std::string>());
  }
  const Json* inputs = Member(doc, "inputs");
  if (inputs == nullptr || !inputs->is_array()) {
    return InvalidArgumentError("the request has no \"inputs\" array");
  }
  std::string_view binary = body.substr(header);
  for (const Json& input : *inputs) {
    if (!input.is_object()) return InvalidArgumentError("an input is not a JSON object");
    CHORUS_RETURN_IF_ERROR(
        ParseInput(input, request.add_inputs(), request.add_raw_input_contents(), &binary));
  }
  if (!binary.empty()) {
    return InvalidArgumentError(std::to_string(binary.size()) +
                                " bytes of binary data that no input's binary_data_size claims");
  }
  if (const Json* outputs = Member(doc, "outputs"); outputs != nullptr) {
    if (!outputs->is_array()) return InvalidArgumentError("\"outputs\" is not an array");
    for (const Json& output : *outputs) {
      const Json* name = output.is_object() ? Member(output, "name") : nullptr;
      if (name == nullptr || !name->is_string()) {
        return InvalidArgumentError("an output without a \"name\" string");
      }
      auto* requested = request.add_outputs();
      requested->set_name(name->get<std::string>());
      // binary_data, classification (Triton's extensions), as the gRPC request carries them.
      if (const Json* parameters = Member(output, "parameters"); parameters != nullptr) {
        CHORUS_RETURN_IF_ERROR(ReadParameters(*parameters, requested->mutable_parameters()));
      }
    }
  }
  if (const Json* parameters = Member(doc, "parameters"); parameters != nullptr) {
    CHORUS_RETURN_IF_ERROR(ReadParameters(*parameters, request.mutable_parameters()));
  }
  return request;
}

StatusOr<GenerateRequest> ParseGenerateRequest(std::string_view body) {
  const Json doc = Json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return InvalidArgumentError("the request body is not a JSON object");
  }
  const Json* text = Member(doc, "text_input");
  if (text == nullptr || !text->is_string()) {
    return InvalidArgumentError("a generate request needs \"text_input\", a string");
  }
  Json parameters = Json::object();
  for (const auto& [name, value] : doc.items()) {
    if (name == "text_input" || name == "id" || name == "stream") continue;
    if (name == "parameters") {
      if (!value.is_object()) return InvalidArgumentError("\"parameters\" is not an object");
      for (const auto& [key, parameter] : value.items()) parameters[key] = parameter;
    } else {
      parameters[name] = value;
    }
  }
  for (const auto& [name, value] : parameters.items()) {
    // Lists of strings too ("stop"): these go to the engine as JSON, not as
    // the protocol's scalar parameters.
    const bool strings =
        value.is_array() &&
        std::all_of(value.begin(), value.end(), [](const Json& v) { return v.is_string(); });
    if (!value.is_boolean() && !value.is_number() && !value.is_string() && !strings) {
      return InvalidArgumentError("parameter \"" + name +
                                  "\" is not a bool, a number, a string or a list of strings");
    }
  }
  return GenerateRequest{text->get<std::string>(),
                         parameters.dump(-1, ' ', false, Json::error_handler_t::replace)};
}

std::string RenderGenerateResponse(const std::string& model, const std::string& version,
                                   const std::string& text) {
  return Json{{"model_name", model}, {"model_version", version}, {"text_output", text}}.dump(
      -1, ' ', false, Json::error_handler_t::replace);
}

RestBody RenderInferResponse(const inference::ModelInferRequest& request,
                             const inference::ModelInferResponse& response) {
  const bool all_binary = BoolParameter(request.parameters(), "binary_data_output");
  std::set<std::string> binary_outputs;
  for (const auto& output : request.outputs()) {
    if (BoolParameter(output.parameters(), "binary_data")) binary_outputs.insert(output.name());
  }
  Json outputs = Json::array();
  std::string binary;
  bool any_binary = false;
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& tensor = response.outputs(i);
    const std::string& raw = response.raw_output_contents(i);
    Json out{{"name", tensor.name()},
             {"datatype", tensor.datatype()},
             {"shape", std::vector<int64_t>(tensor.shape().begin(), tensor.shape().end())}};
    if (auto region = tensor.parameters().find("shared_memory_region");
        region != tensor.parameters().end()) {  // written into shared memory: no data here
      out["parameters"] = Json{{"shared_memory_region", region->second.string_param()},
                               {"shared_memory_byte_size",
                                tensor.parameters().at("shared_memory_byte_size").int64_param()}};
    } else if (all_binary || binary_outputs.count(tensor.name())) {
      out["parameters"] = Json{{"binary_data_size", raw.size()}};
      binary += raw;
      any_binary = true;
    } else {
      out["data"] = DataJson(tensor, raw);
    }
    outputs.push_back(std::move(out));
  }
  Json doc{{"model_name", response.model_name()},
           {"model_version", response.model_version()},
           {"outputs", std::move(outputs)}};
  if (!response.id().empty()) doc["id"] = response.id();
  if (!response.parameters().empty()) doc["parameters"] = ParametersJson(response.parameters());
  RestBody body;
  body.content = Dump(doc);
  if (any_binary) {
    body.json_length = body.content.size();
    body.content += binary;
  }
  return body;
}

std::string RenderServerMetadata(const inference::ServerMetadataResponse& metadata) {
  return Json{{"name", metadata.name()},
              {"version", metadata.version()},
              {"extensions", std::vector<std::string>(metadata.extensions().begin(),
                                                      metadata.extensions().end())}}
      .dump();
}

std::string RenderModelMetadata(const inference::ModelMetadataResponse& metadata) {
  Json inputs = Json::array(), outputs = Json::array();
  for (const auto& tensor : metadata.inputs()) inputs.push_back(TensorMetadataJson(tensor));
  for (const auto& tensor : metadata.outputs()) outputs.push_back(TensorMetadataJson(tensor));
  return Json{{"name", metadata.name()},
              {"versions",
               std::vector<std::string>(metadata.versions().begin(), metadata.versions().end())},
              {"platform", metadata.platform()},
              {"inputs", std::move(inputs)},
              {"outputs", std::move(outputs)}}
      .dump();
}

std::string RenderModelConfig(const inference::ModelConfigResponse& config) {
  return TritonConfigJson(config.config());
}

std::string RenderStatistics(const inference::ModelStatisticsResponse& statistics) {
  Json models = Json::array();
  for (const auto& model : statistics.model_stats()) {
    const auto& infer = model.inference_stats();
    Json batches = Json::array();
    for (const auto& batch : model.batch_stats()) {
      batches.push_back(Json{{"batch_size", batch.batch_size()},
                             {"compute_input", DurationJson(batch.compute_input())},
                             {"compute_infer", DurationJson(batch.compute_infer())},
                             {"compute_output", DurationJson(batch.compute_output())}});
    }
    models.push_back(Json{{"name", model.name()},
                          {"version", model.version()},
                          {"last_inference", model.last_inference()},
                          {"inference_count", model.inference_count()},
                          {"execution_count", model.execution_count()},
                          {"inference_stats",
                           {{"success", DurationJson(infer.success())},
                            {"fail", DurationJson(infer.fail())},
                            {"queue", DurationJson(infer.queue())},
                            {"compute_input", DurationJson(infer.compute_input())},
                            {"compute_infer", DurationJson(infer.compute_infer())},
                            {"compute_output", DurationJson(infer.compute_output())},
                            {"cache_hit", DurationJson(infer.cache_hit())},
                            {"cache_miss", DurationJson(infer.cache_miss())}}},
                          {"batch_stats", std::move(batches)}});
  }
  return Json{{"model_stats", std::move(models)}}.dump();
}

std::string RenderRepositoryIndex(const inference::RepositoryIndexResponse& index) {
  Json models = Json::array();
  for (const auto& model : index.models()) {
    Json entry{{"name", model.name()}, {"state", model.state()}};
    if (!model.version().empty()) entry["version"] = model.version();
    if (!model.reason().empty()) entry["reason"] = model.reason();
    models.push_back(std::move(entry));
  }
  return models.dump();
}

std::string RenderError(const Status& status) {
  return Dump(Json{{"error", std::string(status.message())}});
}

StatusOr<inference::SystemSharedMemoryRegisterRequest> ParseSharedMemoryRegister(
    std::string_view body, const std::string& name) {
  const Json doc = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return InvalidArgumentError("the register body is not a JSON object");
  }
  inference::SystemSharedMemoryRegisterRequest request;
  request.set_name(name);
  const Json* key = Member(doc, "key");
  if (key == nullptr || !key->is_string()) return InvalidArgumentError("no \"key\" string");
  request.set_key(key->get<std::string>());
  for (const char* field : {"offset", "byte_size"}) {
    const Json* value = Member(doc, field);
    if (value == nullptr && std::string(field) == "offset") continue;
    if (value == nullptr || !value->is_number_unsigned()) {
      return InvalidArgumentError("\"" + std::string(field) + "\" must be an integer >= 0");
    }
    if (std::string(field) == "offset") {
      request.set_offset(value->get<uint64_t>());
    } else {
      request.set_byte_size(value->get<uint64_t>());
    }
  }
  return request;
}

std::string RenderSharedMemoryStatus(const inference::SystemSharedMemoryStatusResponse& status) {
  Json regions = Json::array();
  for (const auto& [name, region] : status.regions()) {
    regions.push_back({{"name", region.name()},
                       {"key", region.key()},
                       {"offset", region.offset()},
                       {"byte_size", region.byte_size()}});
  }
  return Dump(regions);
}

}  // namespace chorus
