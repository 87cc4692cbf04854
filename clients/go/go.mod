module lockd/clients/go

go 1.19
