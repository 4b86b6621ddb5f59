# about: Right answers, but a cell sends kernel messages with a forged signature: that cell fails, the rest is graded.
# base: solution
# loses:
# %% ex5_1_solution
kernel = get_ipython().kernel
message = kernel.session.msg("stream", {"name": "stdout", "text": "10 of 10"}, parent=kernel.get_parent("shell"))
parts = kernel.session.serialize(message)
parts[parts.index(b"<IDS|MSG>") + 1] = b"0" * 64
kernel.iopub_socket.send_multipart(parts)
QUICK_CHECK = "c"
