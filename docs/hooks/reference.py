"""MkDocs hook (mkdocs.yml `hooks:`): the reference pages, generated from the code at every build and never committed,
and the site's addresses, read from pyproject.toml's [project.urls]."""

from __future__ import annotations

from typing import TYPE_CHECKING

from docgen import PROJECT, page_markdown, pages
from mkdocs.structure.files import File

if TYPE_CHECKING:
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import Files
    from mkdocs.structure.pages import Page


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    config["site_url"] = PROJECT.documentation
    config["repo_url"] = PROJECT.repository
    config["repo_name"] = PROJECT.repository.removeprefix("https://github.com/")
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for path, text in pages().items():
        files.append(File.generated(config, path, content=text))
    return files


def on_page_markdown(markdown: str, page: Page, **_: object) -> str:
    return page_markdown(markdown, page.file.src_uri)
