module github.com/compforge/agentgo

go 1.25.0
