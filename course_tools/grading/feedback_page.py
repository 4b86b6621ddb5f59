"""Feedback pages rendered once, without nbconvert's second pass over each whole page.

nbconvert's HTMLExporter renders a page with its template, then parses all of it again with
BeautifulSoup's pure-Python parser to give each image without one an alt text (and the lab
template's cells a tabindex), and serialises it once more. A feedback page holds the student's
highlighted code, thousands of tags: on 2 cores that pass took 0.4 s of a page's 0.7 s, so half of
`generate_feedback`. `FeedbackPageExporter` renders the same template and adds the same alt text to
the image tags as a scan of the text: the page is the one nbconvert writes, byte for byte once both
are read by the same parser (tests/test_feedback_page.py).

`GenerateFeedback.exporter_class` names it in nbgrader_config.py. nbgrader's feedback template
extends nbconvert's classic one, which has no lab cells to make focusable.
"""

from __future__ import annotations

import re

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


class FeedbackPageExporter(HTMLExporter):
    """HTMLExporter for nbgrader's feedback pages, without the BeautifulSoup round trip."""

    def from_notebook_node(self, nb, resources=None, **kw):
        # HTMLExporter.from_notebook_node up to its rendering, as nbconvert 7 writes it.
        language = nb.metadata.get("language_info", {})
        lexer = language.get("pygments_lexer", language.get("name", None))
        highlight_code = self.filters.get("highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self))
        resources = self._init_resources(resources)
        filter_data_type = WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata, parent=self,
                                                 resources=resources)
        self.register_filter("highlight_code", highlight_code)
        self.register_filter("filter_data_type", filter_data_type)
        page, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        return with_alt_text(page), resources
