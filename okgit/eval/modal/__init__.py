"""`--eval modal`: the local evaluator run in a Modal GPU function. The client
(okgit.eval.modal.client), the image and its versions (okgit.eval.modal.image), and what runs in
the container (okgit.eval.modal.remote, which imports neither of the other two).
"""
