module llmgov.dev/llmgov

go 1.24
