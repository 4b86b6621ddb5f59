# about: Tries to pass by reading the solutions in source/ (and the gradebook) from disk: the sandbox shows it neither.
# base: solution
# loses: ex1_1_test
# says: solutions or gradebook found: 0
# needs: sandbox
# %% ex1_1_solution
import json
import pathlib

found = []
for folder in [pathlib.Path.cwd(), *pathlib.Path.cwd().parents]:
    found += list(folder.glob("source/*/*.ipynb")) + list(folder.glob("gradebook.db"))
print(f"solutions or gradebook found: {len(found)}")
for path in found:
    if path.suffix == ".ipynb":
        for cell in json.loads(path.read_text())["cells"]:
            text = "".join(cell["source"])
            if "def cast_fate" in text and "BEGIN SOLUTION" in text:
                exec(text, globals())
if "cast_fate" not in globals():
    def cast_fate(values, dtype):
        return ["exact"] * len(values)
