"""The virtual-character pipeline of the second seed, on rsjobs workflows.

params -> images (front, side) -> action videos (enter, leave) -> 8 emotion videos ->
publish, with the user confirming the params and the images. Run it with
``python -m examples.character``; the generators are stand-ins that write real files
(PNG images, animated GIF "videos") with simulated latency, progress and failures.
"""
