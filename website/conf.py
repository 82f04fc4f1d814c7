"""Sphinx configuration of the course website (website/build.py copies it into the pages' folder)."""

project = "Paged attention and prefix caching"
html_title = project
extensions = ["myst_nb"]
html_theme = "sphinx_book_theme"
html_theme_options = {"home_page_in_toc": True, "show_toc_level": 2, "footer_content_items": []}
# The story page of `make demo-html` is copied to the site as it is.
html_extra_path = ["extra"]
exclude_patterns = ["extra"]
html_static_path = ["_static"]
html_css_files = ["course.css"]
# website/build.py runs every notebook first (the learner's Run All); Sphinx only shows the outputs.
nb_execution_mode = "off"
nb_merge_streams = True
# No copies of the pages' sources, and text exactly as written (the leak search compares it).
html_copy_source = False
html_show_sourcelink = False
smartquotes = False
myst_heading_anchors = 3
