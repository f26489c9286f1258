"""File kinds: the registry (registry.py) and one reader module per kind or family.

    registry.py   every kind, its extensions, reader, chunking, size cap, OCR, parts and citation
    document.py   Document, LoadError, text decoding, zip checks: all a reader imports
    html.py pdf.py image.py office.py mail.py notebook.py text.py   the readers

Nothing here imports the engine's pipeline; loaders.py is the one door to the readers.
"""
