"""The course's feedback pages are the pages nbconvert's HTMLExporter writes, rendered once."""

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbconvert.exporters import HTMLExporter
from nbformat.v4 import new_code_cell, new_markdown_cell, new_output
from nbgrader.converters import GenerateFeedback

from course_tools.grading.feedback_page import MISSING_ALT, FeedbackPageExporter, with_alt_text
from course_tools.jobs.nbgrader_course import load_config
from course_tools.lessons import REPO_ROOT

ALT = f'alt="{MISSING_ALT}"'


@pytest.mark.parametrize(("tag", "expected"), [
    ('<img src="a.png">', f'<img src="a.png" {ALT}>'),
    ('<img src="a.png"/>', f'<img src="a.png" {ALT}/>'),
    ('<IMG SRC="a.png" />', f'<IMG SRC="a.png" {ALT} />'),
    ('<img>', f'<img {ALT}>'),
    ('<img src="a.png" alt="a plot">', '<img src="a.png" alt="a plot">'),
    ('<img alt src="a.png">', '<img alt src="a.png">'),
    ("<img src='x' ALT = 'y'>", "<img src='x' ALT = 'y'>"),
    # Neither another attribute's name nor a quoted value is an alt attribute; ">" may be quoted.
    ('<img data-alt="x" src="a.png">', f'<img data-alt="x" src="a.png" {ALT}>'),
    ('<img title="alt=x > y" src="a.png">', f'<img title="alt=x > y" src="a.png" {ALT}>'),
    ('<p>&lt;img src="a.png"&gt; and <imgs></p>', '<p>&lt;img src="a.png"&gt; and <imgs></p>'),
])
def test_each_image_without_alt_text_gets_nbconverts(tag, expected):
    assert with_alt_text(tag) == expected


def notebook_with_every_kind_of_image():
    """The worked solution of lesson 04 (its plots, highlighted code, tables) and the images a
    student's outputs can hold."""
    notebook = nbformat.read(REPO_ROOT / "notebooks" / "04_memory" / "memory.ipynb", as_version=4)
    for cell in notebook.cells:  # as nbgrader's GetGrades leaves them for the feedback template
        if cell.metadata.get("nbgrader", {}).get("grade"):
            cell.metadata.nbgrader.update(score=cell.metadata.nbgrader.points, comment=None)
    html = ('<p>a student\'s image: <img src="data:image/png;base64,iVBORw0KGgo="> and one with text '
            '<img title="alt=no, > is quoted" src="x.png"> <img src="y.png" alt="described"></p>')
    notebook.cells += [
        new_markdown_cell("![a described plot](data:image/png;base64,iVBORw0KGgo=)"),
        new_code_cell("show()", outputs=[
            new_output("display_data", data={"text/html": html, "text/plain": "an image"})]),
    ]
    return notebook


def test_a_page_is_nbconverts_page(tmp_path):
    config = GenerateFeedback(config=load_config()).config
    assert config.GenerateFeedback.exporter_class is FeedbackPageExporter
    notebook = notebook_with_every_kind_of_image()
    resources = {"metadata": {"name": "memory", "path": str(tmp_path)},
                 "nbgrader": {"notebook": "memory", "score": 9.0, "max_score": 10.0, "late_penalty": 0.0}}
    expected, _ = HTMLExporter(config=config).from_notebook_node(notebook, dict(resources))
    page, _ = FeedbackPageExporter(config=config).from_notebook_node(notebook, dict(resources))
    assert 'class="output_subarea' in page and "<style" in page, "not nbgrader's feedback template"
    assert page.count(ALT) >= 3, "the plots and the student's image without text need their alt text"
    assert str(BeautifulSoup(page, features="html.parser")) == expected


def test_cells_rendered_for_an_earlier_page_render_the_same_on_the_next(tmp_path):
    """The second student's page reuses the first's highlighting and Markdown: still nbconvert's
    page, and a cell whose source changed (the student's answer) is rendered anew."""
    config = GenerateFeedback(config=load_config()).config
    resources = {"metadata": {"name": "memory", "path": str(tmp_path)},
                 "nbgrader": {"notebook": "memory", "score": 9.0, "max_score": 10.0, "late_penalty": 0.0}}
    first, second = notebook_with_every_kind_of_image(), notebook_with_every_kind_of_image()
    answer = next(cell for cell in second.cells if cell.metadata.get("nbgrader", {}).get("solution"))
    answer.source += "\nprint('a second student')  # an answer of their own"
    second.cells.append(new_markdown_cell("My *own* note, `code` and a [link](https://pytorch.org)."))
    FeedbackPageExporter(config=config).from_notebook_node(first, dict(resources))
    page, _ = FeedbackPageExporter(config=config).from_notebook_node(second, dict(resources))
    expected, _ = HTMLExporter(config=config).from_notebook_node(second, dict(resources))
    assert "a second student" in page and "<em>own</em>" in page
    assert str(BeautifulSoup(page, features="html.parser")) == expected


def test_each_students_folder_renders_the_shared_markdown_once(tmp_path):
    """The notebook's folder differs per student (feedback/<student>/...); only embedded image files
    are read from it, so the release's prose is rendered once for a class, not once a student."""
    from course_tools.grading import feedback_page

    config = GenerateFeedback(config=load_config()).config
    notebook = notebook_with_every_kind_of_image()
    for embed_images, renderings_per_page in ((False, 0), (True, 1)):
        config.HTMLExporter.embed_images = embed_images
        feedback_page._MARKDOWN.clear()
        sizes = []
        for student in ("ann", "ben"):
            resources = {"metadata": {"name": "memory", "path": str(tmp_path / student)},
                         "nbgrader": {"notebook": "memory", "score": 9.0, "max_score": 10.0,
                                      "late_penalty": 0.0}}
            page, _ = FeedbackPageExporter(config=config).from_notebook_node(notebook, dict(resources))
            expected, _ = HTMLExporter(config=config).from_notebook_node(notebook, dict(resources))
            assert str(BeautifulSoup(page, features="html.parser")) == expected
            sizes.append(len(feedback_page._MARKDOWN))
        markdown_cells = sum(cell.cell_type == "markdown" for cell in notebook.cells)
        assert sizes[1] - sizes[0] == renderings_per_page * markdown_cells, embed_images
