"""What the ``rsjobs`` command line shows: aligned tables (:mod:`.tables`), the rows of
each kind of table (:mod:`.views`) and the live progress of ``enqueue --wait``
(:mod:`.progress`). Imported by the commands only, so that ``import rsjobs`` never loads
``rich``."""
