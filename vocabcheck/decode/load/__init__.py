"""Getting a pair ready to decode: model weights and prompt files read (:mod:`.loading`), chat templates rendered in a
bounded child process (:mod:`.templates`), and what the decoder checks before it runs a model: its attention layout
and cache rollback (:mod:`.layout`) and the behavioural cache check on its loaded weights (:mod:`.cache_check`)."""
