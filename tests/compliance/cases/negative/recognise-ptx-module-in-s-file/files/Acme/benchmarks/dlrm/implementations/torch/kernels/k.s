.version 7.0
.target sm_80
.address_size 64
.visible .entry hidden(
  .param .u64 x
)
{
  ret;
}
