"""What the pages a teacher or a student opens may show of a submission: nothing that runs.

The formgrader renders autograded/<student>/<assignment>/<notebook>.ipynb with nbconvert's HTML
exporter, served from the teacher's Jupyter origin with the teacher's login, and generate_feedback
renders the same notebook into the student's feedback page. Neither escapes what a student's cells
put there: an HTML output's `<img onerror=...>`, a JavaScript output, raw HTML in a markdown cell, a
raw cell marked text/html, an image's `width` metadata (pasted into the page unquoted) or its
`filenames` metadata (an image source), and saved widget state all become live script or remote
requests in that page. `NeutraliseActiveContent` rewrites the notebook so that none of it can:

- output bundles keep text/plain, PNG, JPEG and GIF pixels; HTML is cleaned by nh3 (ammonia) to an
  allowlist of text, table, list and image markup, images only as `data:` URLs, links only to
  http(s), mailto or a fragment of the page; markdown is cleaned as a markdown cell is; SVG is
  shown through an `<img>`, where it runs no script and fetches nothing; LaTeX stays as text;
  every other kind (JavaScript, widgets, vendor types) is dropped, with a note where nothing
  readable remains; output metadata keeps only numeric image sizes;
- a markdown cell stays as it is when the markdown alone renders it (text, math, code, tables,
  links and images within the same rules); otherwise it becomes the cleaned HTML of its
  rendering, laid out so that nbconvert passes it through unchanged;
- raw cells keep their text only (nbconvert pastes a raw cell of type text/html into the page);
  attachments keep PNG, JPEG and GIF; the notebook's saved widget state is removed.

Error and stream outputs are left alone: nbconvert escapes them.
"""

from __future__ import annotations

import base64
import functools
import html
import re

import nh3
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbgrader.preprocessors import NbGraderPreprocessor

KEPT_IMAGES = ("image/png", "image/jpeg", "image/gif")
REMOVED_NOTE = ("(output removed by the grader: it was active content, such as JavaScript or a widget, "
                "which grading pages do not run)")
MARKDOWN_NOTE = "<p>(markdown removed by the grader: it could not be shown safely)</p>"
# What an image whose source was removed shows instead of a broken image.
_REMOVED_IMAGE_SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="200" height="16"><text x="0" y="12" '
                      'font-family="sans-serif" font-size="12" fill="#777">(image removed by the grader)'
                      "</text></svg>")
REMOVED_IMAGE = "data:image/svg+xml;base64," + base64.b64encode(_REMOVED_IMAGE_SVG.encode()).decode()

TAGS = {
    "a", "abbr", "b", "blockquote", "br", "caption", "cite", "code", "col", "colgroup", "dd", "del",
    "dfn", "div", "dl", "dt", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins", "kbd",
    "li", "mark", "ol", "p", "pre", "q", "s", "samp", "small", "span", "strike", "strong", "sub", "sup",
    "table", "tbody", "td", "tfoot", "th", "thead", "tr", "tt", "u", "ul", "var", "wbr",
}
ATTRIBUTES = {
    "a": {"href", "title"},
    "img": {"src", "alt", "title", "width", "height"},
    "table": {"border"},
    "td": {"colspan", "rowspan", "align"},
    "th": {"colspan", "rowspan", "align"},
    "ol": {"start"},
    "abbr": {"title"},
}
# Dropped with their content: code, styles, and markup whose text means nothing without it.
CLEAN_CONTENT_TAGS = {"script", "style", "template", "svg", "math", "noscript", "iframe", "object",
                      "textarea", "select"}
# ammonia checks these schemes; the attribute filter below narrows each attribute further.
URL_SCHEMES = {"http", "https", "mailto", "data"}

# An image in the page is its own bytes: a fetch of any URL is a request the student chose, and a
# relative one reaches the formgrader's file handler on the teacher's origin.
_IMAGE_URL = re.compile(r"data:image/(png|jpeg|gif|svg\+xml);base64,[A-Za-z0-9+/=\s]*", re.IGNORECASE)
_LINK_URL = re.compile(r"(https?://|mailto:|#)", re.IGNORECASE)
_SIZE = re.compile(r"\d{1,5}%?")
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
_BLANK_LINE = re.compile(r"^[ \t]*$", re.MULTILINE)

# The token kinds of markdown that renders to fixed, escaped markup; links, images and code blocks
# are judged by their attributes, and anything else (raw HTML above all) is not inert.
_INERT_TOKENS = frozenset({
    "blank_line", "block_math", "block_quote", "block_text", "codespan", "def_list", "def_list_head",
    "def_list_item", "emphasis", "heading", "inline_math", "latex_environment", "linebreak", "list",
    "list_item", "multiline_math", "paragraph", "softbreak", "strikethrough", "strong", "table",
    "table_body", "table_cell", "table_head", "table_row", "task_list_item", "text", "thematic_break",
})


def _allowed_value(tag: str, attribute: str, value: str) -> str | None:
    if attribute == "src":
        return value if _IMAGE_URL.fullmatch(value) else REMOVED_IMAGE
    if attribute == "href":
        return value if _LINK_URL.match(value) else None
    if attribute in ("width", "height"):
        return value if _SIZE.fullmatch(value.strip()) else None
    return value


def sanitise_html(markup: str) -> str:
    """`markup` with everything removed that could run, fetch or restyle the page around it."""
    return nh3.clean(markup, tags=TAGS, clean_content_tags=CLEAN_CONTENT_TAGS, attributes=ATTRIBUTES,
                     attribute_filter=_allowed_value, url_schemes=URL_SCHEMES, strip_comments=True,
                     link_rel="noopener noreferrer")


def text_only(markup: str) -> str:
    """The text of `markup`, escaped as HTML, without a single tag."""
    return nh3.clean(markup, tags=set(), clean_content_tags=CLEAN_CONTENT_TAGS, attributes={}, link_rel=None)


# -- markdown ---------------------------------------------------------------------------------


class _MissingAttachmentsRenderer(IPythonRenderer):
    """nbconvert's markdown renderer, but an image of a removed attachment loses its source instead
    of failing the page."""

    def _embed_image_or_attachment(self, src: str) -> str:
        if src.startswith("attachment:") and src[len("attachment:"):] not in self.attachments:
            return ""
        return super()._embed_image_or_attachment(src)


def _render(source: str, attachments: dict) -> str:
    """The HTML nbconvert's exporters make of this markdown (HTMLExporter.markdown2html)."""
    return MarkdownWithMath(renderer=_MissingAttachmentsRenderer(escape=False, attachments=attachments)
                            ).render(source)


def _tokens(source: str):
    pending = list(MarkdownWithMath(renderer=None)(source))
    while pending:
        token = pending.pop()
        yield token
        pending.extend(token.get("children") or [])


def _inert_token(token: dict, attachments: dict) -> bool:
    kind, attrs = token["type"], token.get("attrs") or {}
    if kind == "link":
        return bool(_LINK_URL.match(attrs.get("url") or ""))
    if kind == "image":
        url = attrs.get("url") or ""
        if url.startswith("attachment:"):
            return url[len("attachment:"):] in attachments
        return bool(_IMAGE_URL.fullmatch(url))
    if kind == "block_code":  # mermaid blocks are rendered for a script to draw
        return not (attrs.get("info") or "").strip().startswith("mermaid")
    return kind in _INERT_TOKENS


def _passes_through(markup: str) -> bool:
    """Whether nbconvert's markdown rendering gives back `markup` itself (one HTML block)."""
    return _render(markup, {}).rstrip("\n") == markup.rstrip("\n")


def _one_html_block(markup: str) -> str | None:
    # A blank line ends an HTML block and the markdown after it would be rendered (a link would
    # become an image); a character reference keeps the line and means the same whitespace.
    markup = _BLANK_LINE.sub("&#32;", markup.strip("\n"))
    for candidate in (markup, f"<div>\n{markup}\n</div>"):
        if _passes_through(candidate):
            return candidate
    return None


# A class's notebooks share most markdown cells (the lesson's own prose): each is judged once per
# process. Only cells without attachments (the answer depends on nothing else) and of a bounded
# length are kept, so a student's long or many cells cannot grow the grader.
KEPT_MARKDOWN_CELLS = 2048
KEPT_MARKDOWN_CHARACTERS = 20_000


def inert_markdown(source: str, attachments: dict | None = None) -> str:
    """Markdown that renders to nothing that runs or fetches: `source` itself when its markdown alone
    makes it so, else the cleaned HTML of its rendering (which markdown renders as it is)."""
    if not attachments and len(source) <= KEPT_MARKDOWN_CHARACTERS:
        return _kept_inert_markdown(source)
    return _inert_markdown(source, attachments or {})


@functools.lru_cache(maxsize=KEPT_MARKDOWN_CELLS)
def _kept_inert_markdown(source: str) -> str:
    return _inert_markdown(source, {})


def _inert_markdown(source: str, attachments: dict) -> str:
    try:
        if all(_inert_token(token, attachments) for token in _tokens(source)):
            return source
        cleaned = _one_html_block(sanitise_html(_render(source, attachments)))
    except Exception:  # markdown the renderer cannot take must not fail the student's grading
        cleaned = None
    if cleaned is None:  # the student's text, shown as text
        cleaned = _one_html_block(f"<pre>{html.escape(source)}</pre>")
    return cleaned if cleaned is not None else MARKDOWN_NOTE


# -- outputs ----------------------------------------------------------------------------------


def _text(value) -> str | None:
    if isinstance(value, list) and all(isinstance(part, str) for part in value):
        return "".join(value)
    return value if isinstance(value, str) else None


def _inert_bundle(data: dict, dropped: set[str]) -> dict:
    kept, latex, svg = {}, None, None
    for mime, value in data.items():
        text = _text(value)
        if text is None:
            dropped.add(f"{mime} output")
        elif mime == "text/plain":
            kept[mime] = text
        elif mime in KEPT_IMAGES and _BASE64.fullmatch(text):
            kept[mime] = text
        elif mime == "text/html":
            kept[mime] = sanitise_html(text)
        elif mime == "text/markdown":
            kept[mime] = inert_markdown(text)
        elif mime == "text/latex":
            latex = text
        elif mime == "image/svg+xml":
            svg = text
        else:
            dropped.add(f"{mime} output")
    if latex is not None and "text/plain" not in kept:
        kept["text/plain"] = latex
    if svg is not None and not any(mime in kept for mime in ("text/html", *KEPT_IMAGES)):
        encoded = base64.b64encode(svg.encode("utf-8")).decode("ascii")
        kept["text/html"] = f'<img src="data:image/svg+xml;base64,{encoded}" alt="SVG image">'
    if not kept:
        kept["text/plain"] = REMOVED_NOTE
    return kept


def _image_sizes(metadata, kept: dict) -> dict:
    """Output metadata reduced to what an image needs: nbconvert pastes `width` and `height`
    unquoted into the page, and takes `filenames` for an image's source."""
    sizes = {}
    for mime in KEPT_IMAGES:
        given = metadata.get(mime) if isinstance(metadata, dict) and mime in kept else None
        if isinstance(given, dict):
            numbers = {key: value for key, value in given.items() if key in ("width", "height")
                       and isinstance(value, int) and not isinstance(value, bool) and value >= 0}
            if numbers:
                sizes[mime] = numbers
    return sizes


def _whole_number(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def neutralise_output(output, dropped: set[str]) -> None:
    if output.get("output_type") not in ("display_data", "execute_result"):
        return  # stream and error outputs: nbconvert escapes them
    data = output.get("data")
    output["data"] = _inert_bundle(data if isinstance(data, dict) else {}, dropped)
    output["metadata"] = _image_sizes(output.get("metadata"), output["data"])
    for key in [key for key in output if key not in ("output_type", "data", "metadata", "execution_count")]:
        del output[key]
    if output["output_type"] == "execute_result":
        output["execution_count"] = _whole_number(output.get("execution_count"))


# -- cells and the notebook -------------------------------------------------------------------


def _image_attachments(cell, dropped: set[str]) -> dict:
    attachments = {}
    for name, bundle in (cell.get("attachments") or {}).items():
        bundle = bundle if isinstance(bundle, dict) else {}
        images = {mime: _text(value) for mime, value in bundle.items() if mime in KEPT_IMAGES
                  and _text(value) is not None and _BASE64.fullmatch(_text(value))}
        if len(images) < len(bundle):
            dropped.add("an attachment")
        if images:
            attachments[name] = images
    if "attachments" in cell:
        cell["attachments"] = attachments
    return attachments


def neutralise_cell(cell) -> set[str]:
    """Make one cell inert, in place; returns what was removed or rewritten, in words."""
    dropped: set[str] = set()
    source = _text(cell.get("source")) or ""
    if cell.get("cell_type") == "markdown":
        inert = inert_markdown(source, _image_attachments(cell, dropped))
        if inert != source:
            dropped.add("HTML or links in a markdown cell")
        cell["source"] = inert
    elif cell.get("cell_type") == "raw":
        _image_attachments(cell, dropped)
        cell["source"] = text_only(source)
    elif cell.get("cell_type") == "code":
        cell["execution_count"] = _whole_number(cell.get("execution_count"))
        for output in cell.get("outputs", []):
            neutralise_output(output, dropped)
    return dropped


class NeutraliseActiveContent(NbGraderPreprocessor):
    """Nothing of a notebook runs or fetches anything in the HTML nbconvert makes of it.

    In Autograde right after execution (the autograded notebook, which the formgrader renders, is
    written clean), last in GenerateFeedback (no later step rewrites the cleaned markup) and in the
    formgrader's HTMLExporter (notebooks autograded before this step existed).
    """

    def preprocess(self, nb, resources):
        dropped: set[str] = set()
        if nb.metadata.pop("widgets", None) is not None:
            dropped.add("saved widget state")
        for cell in nb.cells:
            dropped |= neutralise_cell(cell)
        if dropped:
            self.log.info("Made inert for grading pages: %s", ", ".join(sorted(dropped)))
        return nb, resources

    def preprocess_cell(self, cell, resources, index):
        return cell, resources
