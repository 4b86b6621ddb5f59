# about: Everything right, then prints the input history and the source of every function, hoping to read the hidden tests in the feedback.
# base: solution
# loses:
# says: input history follows
# %% ex4_1_solution
import inspect

QUICK_CHECK = "c"
print("input history follows")
print(In)
print(_ih[-4:])
for value in list(globals().values()):
    if inspect.isfunction(value):
        try:
            print(inspect.getsource(value))
        except (OSError, TypeError):
            pass
