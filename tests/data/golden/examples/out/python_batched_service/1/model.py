import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Sums each request's vector; ragged batching hands several requests to one execute."""

    def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "input_field").as_numpy()
            total = values.sum(axis=-1, keepdims=True).astype(np.float32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("sum", total)]))
        return responses
