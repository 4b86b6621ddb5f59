"""Feedback pages rendered once, without nbconvert's second pass over each whole page.

nbconvert's HTMLExporter renders a page with its template, then parses all of it again with
BeautifulSoup's pure-Python parser to give each image without one an alt text (and the lab
template's cells a tabindex), and serialises it once more. A feedback page holds the student's
highlighted code, thousands of tags: on 2 cores that pass took 0.4 s of a page's 0.7 s, so half of
`generate_feedback`. `FeedbackPageExporter` renders the same template and adds the same alt text to
the image tags as a scan of the text: the page is the one nbconvert writes, byte for byte once both
are read by the same parser (tests/grading/test_feedback_page.py).

Most of a class's pages show the same cells: the release's text and code around each student's
answers. Highlighting code (pygments) and rendering Markdown (mistune) was a third of what remained
of a page's time, so the exporter keeps each rendering it made, keyed by everything it depends on,
and a cell the previous pages showed costs a lookup.

`GenerateFeedback.exporter_class` names it in nbgrader_config.py. nbgrader's feedback template
extends nbconvert's classic one, which has no lab cells to make focusable.
"""

from __future__ import annotations

import json
import re

from jinja2 import pass_context
from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter

# nbconvert's own words, so that a page reads the same whichever exporter wrote it.
MISSING_ALT = "No description has been provided for this image"
# An <img> tag: its attributes (quoted values may hold ">"), then an optional "/" before ">".
_IMAGE_TAG = re.compile(r"""<img\b((?:[^>"']|"[^"]*"|'[^']*')*?)(\s*/?)>""", re.IGNORECASE)
_ALT_ATTRIBUTE = re.compile(r"""(?:^|\s)alt(?:\s*=|\s|$)""", re.IGNORECASE)
_QUOTED = re.compile(r""""[^"]*"|'[^']*'""")


def with_alt_text(page: str) -> str:
    """Every <img> tag of `page` that has no alt attribute gets nbconvert's alt text, after its
    other attributes (where BeautifulSoup puts it)."""

    def add_alt(tag: re.Match) -> str:
        attributes, closing = tag.group(1), tag.group(2)
        if _ALT_ATTRIBUTE.search(_QUOTED.sub('""', attributes)):
            return tag.group(0)
        return f'{tag.group(0)[:4]}{attributes} alt="{MISSING_ALT}"{closing}>'

    return _IMAGE_TAG.sub(add_alt, page)


# Renderings kept per process; a class's pages share most cells, and a bound keeps a long run small.
MAX_KEPT = 4096


class _Kept(dict):
    def keep(self, key, render):
        if key not in self:
            if len(self) >= MAX_KEPT:
                self.clear()
            self[key] = render()
        return self[key]


_HIGHLIGHTED, _MARKDOWN = _Kept(), _Kept()


class _KeptHighlight:
    """Highlight2HTML's filter, each (source, language, magics language) highlighted once."""

    def __init__(self, highlight: Highlight2HTML):
        self.highlight = highlight

    def __call__(self, source, language=None, metadata=None):
        magics = metadata.get("magics_language") if metadata else None
        options = json.dumps(self.highlight.extra_formatter_options, sort_keys=True, default=str)
        key = (source, language or self.highlight.pygments_lexer, magics, options)
        return _HIGHLIGHTED.keep(key, lambda: self.highlight(source, language, metadata))


class FeedbackPageExporter(HTMLExporter):
    """HTMLExporter for nbgrader's feedback pages, without the BeautifulSoup round trip, each
    cell's highlighting and Markdown rendered once per process."""

    @pass_context  # as HTMLExporter's: jinja passes the template's context (the cell, the resources)
    def markdown2html(self, context, source):
        cell = context.get("cell", {})
        if cell.get("attachments"):
            return super().markdown2html(context, source)
        # The notebook's folder (each student's own) matters only to images embedded from files.
        path = context.get("resources", {}).get("metadata", {}).get("path", "") if self.embed_images else ""
        settings = json.dumps([self.embed_images, self.anchor_link_text, self.exclude_anchor_links,
                               self.lexer_options], sort_keys=True, default=str)
        return _MARKDOWN.keep((source, path, settings), lambda: super(FeedbackPageExporter, self)
                              .markdown2html(context, source))

    def from_notebook_node(self, nb, resources=None, **kw):
        # HTMLExporter.from_notebook_node up to its rendering, as nbconvert 7 writes it.
        language = nb.metadata.get("language_info", {})
        lexer = language.get("pygments_lexer", language.get("name", None))
        highlight_code = self.filters.get("highlight_code")
        if highlight_code is None:
            highlight_code = _KeptHighlight(Highlight2HTML(pygments_lexer=lexer, parent=self))
        resources = self._init_resources(resources)
        filter_data_type = WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata, parent=self,
                                                 resources=resources)
        self.register_filter("highlight_code", highlight_code)
        self.register_filter("filter_data_type", filter_data_type)
        page, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        return with_alt_text(page), resources
