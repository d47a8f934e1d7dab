module idmint/client

go 1.19
